import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from inferline.labels import imagenet_labels
from inferline_models.export import STAMP_FILE, _replace_dir, is_fresh, stamp
from inferline_models.repository import load_spec, model_dir, onnx_path, render_config


def test_repository_layout(model_repository: Path) -> None:
    directory = model_dir(model_repository)
    spec = load_spec(model_repository)
    assert spec.name == "efficientnet_lite0"
    assert spec.max_batch_size == 64
    labels = (directory / "labels.txt").read_text(encoding="utf-8").splitlines()
    assert labels == list(imagenet_labels())
    assert onnx_path(model_repository).stat().st_size > 10_000_000
    assert is_fresh(model_repository)


def test_onnx_classifies_a_cat_at_any_batch_size(
    model_repository: Path, cat_chw: npt.NDArray[np.uint8], cat_classes: frozenset[int]
) -> None:
    session = ort.InferenceSession(
        str(onnx_path(model_repository)), providers=["CPUExecutionProvider"]
    )
    (single,) = session.run(["PROBS"], {"INPUT": cat_chw[None]})
    assert single.shape == (1, 1000)
    assert single.dtype == np.float32
    assert abs(float(single.sum()) - 1.0) < 1e-4
    assert set(np.argsort(-single[0])[:3].tolist()) & cat_classes

    noise = np.random.default_rng(1).integers(0, 256, size=(2, 3, 224, 224), dtype=np.uint8)
    (batch,) = session.run(["PROBS"], {"INPUT": np.concatenate([cat_chw[None], noise])})
    assert batch.shape == (3, 1000)
    np.testing.assert_allclose(batch[0], single[0], atol=1e-5)


def test_fresh_repository_is_reused_without_torch(model_repository: Path) -> None:
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from inferline_models.export import build_repository\n"
        "assert not build_repository(Path(sys.argv[1]))\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(model_repository)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout


def test_stale_stamp_is_not_fresh(tmp_path: Path) -> None:
    directory = model_dir(tmp_path)
    (directory / "1").mkdir(parents=True)
    (directory / "1" / "model.onnx").write_bytes(b"")
    (directory / "config.pbtxt").write_text(render_config(), encoding="utf-8")
    (directory / "labels.txt").write_text("x\n", encoding="utf-8")
    assert not is_fresh(tmp_path)  # no stamp
    (directory / STAMP_FILE).write_text(json.dumps(stamp()), encoding="utf-8")
    assert is_fresh(tmp_path)
    (directory / STAMP_FILE).write_text(json.dumps({**stamp(), "opset": 1}), encoding="utf-8")
    assert not is_fresh(tmp_path)
    (directory / STAMP_FILE).write_text("{not json", encoding="utf-8")
    assert not is_fresh(tmp_path)


def test_replace_dir_swaps_whole_directories(tmp_path: Path) -> None:
    target = tmp_path / "model"
    for content in ("old", "new"):
        staged = tmp_path / f".model.{content}"
        staged.mkdir()
        (staged / "f").write_text(content, encoding="utf-8")
        _replace_dir(staged, target)
        assert (target / "f").read_text(encoding="utf-8") == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
