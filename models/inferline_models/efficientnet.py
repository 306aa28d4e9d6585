"""EfficientNet-Lite networks with their ImageNet weights, exported as plain ONNX networks.

The export is the bare network (float32 NCHW input normalised TF-Lite's way, logits out): the
importer (:mod:`inferline_models.importer`) wraps it to the pipeline's uint8-in,
probabilities-out contract, as it wraps any model. :class:`UInt8Classifier` is the same
contract in torch, the reference the wrapped graph is checked against.

Imports torch: load it only when exporting.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import torch
from efficientnet_lite_pytorch import EfficientNet

from inferline_models.repository import INPUT_NAME, OUTPUT_NAME

# The TF-Lite preprocessing these weights were trained with: (x - 127) / 128, RGB.
MEAN = 127.0
SCALE = 128.0
# The same as the importer's affine normalisation, y = x * scale + offset.
IMPORT_SCALE = 1.0 / SCALE
IMPORT_OFFSET = -MEAN / SCALE
# The plain network's tensor names (the importer renames them INPUT and PROBS).
NETWORK_INPUT = "images"
NETWORK_OUTPUT = "logits"


class UInt8Classifier(torch.nn.Module):
    """uint8 NCHW RGB images -> softmax probabilities; normalisation is part of the graph."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = (images.float() - MEAN) / SCALE
        return torch.softmax(self.net(x), dim=1)


def build_network(arch: str, weights: Path) -> torch.nn.Module:
    """EfficientNet-Lite ``arch`` (e.g. ``efficientnet-lite0``) with ``weights``, eval mode.

    Its input is normalised ((x - 127) / 128) float32 NCHW RGB; its output, ImageNet logits.
    """
    # from_pretrained prints a line of its own; keep the CLI output ours.
    with contextlib.redirect_stdout(io.StringIO()):
        net = EfficientNet.from_pretrained(arch, weights_path=str(weights))
    # Lite models use ReLU6, not swish: never call net.set_swish(), it would swap ReLU6 for swish.
    return net.eval()  # type: ignore[no-any-return]


def export_network(
    net: torch.nn.Module,
    path: Path,
    size: int,
    opset: int,
    *,
    nhwc: bool = False,
    names: tuple[str, str] = (NETWORK_INPUT, NETWORK_OUTPUT),
) -> None:
    """Export a float32 image network ([batch, 3, size, size], or NHWC) with a dynamic batch
    axis; ``names`` are its input's and output's (TorchScript exporter: no onnxscript needed)."""
    shape = (2, size, size, 3) if nhwc else (2, 3, size, size)
    dummy = torch.zeros(shape, dtype=torch.float32)
    inputs, outputs = names
    with warnings.catch_warnings():
        # The deprecation notice of the TorchScript exporter, and "Constant folding - Only
        # steps=1 can be constant folded" for the pads of ZeroPad2d (ONNX Runtime folds those).
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message="Constant folding", category=UserWarning)
        torch.onnx.export(
            net,
            (dummy,),
            str(path),
            input_names=[inputs],
            output_names=[outputs],
            dynamic_axes={inputs: {0: "batch"}, outputs: {0: "batch"}},
            opset_version=opset,
            dynamo=False,
        )


def max_abs_diff(
    model: torch.nn.Module, onnx_model: bytes, size: int, batch: int = 5, seed: int = 0
) -> float:
    """Largest |p_torch - p_onnxruntime| on one random uint8 batch: ``model`` takes uint8
    pixels, as does the wrapped ONNX model ``onnx_model`` (serialised)."""
    rng = np.random.default_rng(seed)
    images: npt.NDArray[np.uint8] = rng.integers(
        0, 256, size=(batch, 3, size, size), dtype=np.uint8
    )
    with torch.inference_mode():
        expected = model(torch.from_numpy(images)).numpy()
    session = ort.InferenceSession(onnx_model, providers=["CPUExecutionProvider"])
    (actual,) = session.run([OUTPUT_NAME], {INPUT_NAME: images})
    if actual.shape != expected.shape:
        raise ValueError(f"ONNX output shape {actual.shape} != torch {expected.shape}")
    return float(np.max(np.abs(np.asarray(actual, dtype=np.float32) - expected)))
