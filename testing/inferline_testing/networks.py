"""Classifier networks in conventions other than the pipeline's, for tests of the import path
(``python -m inferline_models add``).

:func:`export_nhwc_mean_std` is a real network (EfficientNet-Lite0 with its ImageNet weights)
that takes what many exported models take - float32 NHWC, torchvision's mean/std normalisation -
so that an import can be checked against the original on a real photo. :func:`tiny_convnet` is
a few-kilobyte conv net, built with ``onnx.helper``, for the cases where only the shapes and
dtypes matter.

Both need ``inferline-models`` installed (torch, ONNX); inferline-testing does not depend on
it, so they import it when called.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    import onnx

# torchvision's ImageNet normalisation: y = (x / 255 - MEAN) / STD, per R, G, B.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
NHWC_SIZE = 224
NHWC_INPUT = "pixels"
NHWC_OUTPUT = "logits"


def export_nhwc_mean_std(path: Path, opset: int = 18) -> None:
    """Write EfficientNet-Lite0 (ImageNet weights) as an ONNX model that takes float32 NHWC RGB
    ``[batch, 224, 224, 3]`` normalised with :data:`MEAN` / :data:`STD` over x/255 (input
    ``pixels``) and answers ImageNet logits ``[batch, 1000]`` (output ``logits``); dynamic batch.

    The network was trained on TF-Lite's (x - 127) / 128: the wrapper undoes torchvision's
    normalisation and applies that, so the model classifies as well as the built-in one.
    Needs inferline-models installed (torch, the weights).
    """
    import torch

    from inferline_models.efficientnet import MEAN as TF_MEAN
    from inferline_models.efficientnet import SCALE as TF_SCALE
    from inferline_models.efficientnet import build_network, export_network
    from inferline_models.export import BUILT_IN

    spec = BUILT_IN["efficientnet_lite0"]
    net = build_network(spec.arch, spec.weights_path())

    class NhwcMeanStd(torch.nn.Module):
        mean: torch.Tensor
        std: torch.Tensor

        def __init__(self) -> None:
            super().__init__()
            self.net = net
            self.register_buffer("mean", torch.tensor(MEAN).reshape(1, 1, 1, 3))
            self.register_buffer("std", torch.tensor(STD).reshape(1, 1, 1, 3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            pixels = (x * self.std + self.mean) * 255.0
            tf_lite = (pixels - TF_MEAN) / TF_SCALE
            return self.net(tf_lite.permute(0, 3, 1, 2))  # type: ignore[no-any-return]

    export_network(
        NhwcMeanStd().eval(), path, NHWC_SIZE, opset, nhwc=True, names=(NHWC_INPUT, NHWC_OUTPUT)
    )


def tiny_convnet(
    *,
    dtype: Literal["float32", "float16", "uint8", "int32", "float64"] = "float32",
    layout: Literal["NCHW", "NHWC"] = "NCHW",
    size: int | str | None = 16,
    height: int | str | None = None,
    batch: int | str = "N",
    classes: int | str = 5,
    softmax: bool = False,
    reshape_to_batch: bool = False,
    opset: int = 18,
    seed: int = 0,
) -> onnx.ModelProto:
    """Conv 3x3 (3 -> 4) -> ReLU -> global average pool -> Gemm -> ``classes`` logits (or
    probabilities with ``softmax``), taking ``dtype`` images of ``layout``: input ``x``
    ``[batch, 3, height, size]`` (NCHW) or ``[batch, height, size, 3]``, output ``y``.

    A string or ``None`` dimension is symbolic or unknown; ``height`` defaults to ``size``.
    ``reshape_to_batch``: flatten with a Reshape to ``[batch, -1]`` (an int ``batch``), as some
    exporters write a fixed batch into the graph itself.
    uint8 and int32 inputs are cast to float inside; float16 runs in float16 throughout.
    Random weights (``seed``): it classifies nothing, but any wrapping mistake changes its answer.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    elem = {
        "float32": TensorProto.FLOAT,
        "float16": TensorProto.FLOAT16,
        "uint8": TensorProto.UINT8,
        "int32": TensorProto.INT32,
        "float64": TensorProto.DOUBLE,
    }[dtype]
    compute = np.float16 if dtype == "float16" else np.float64 if dtype == "float64" else np.float32
    compute_elem = {np.float16: TensorProto.FLOAT16, np.float64: TensorProto.DOUBLE}.get(
        compute, TensorProto.FLOAT
    )
    rng = np.random.default_rng(seed)
    width = 4
    out_classes = classes if isinstance(classes, int) else 5
    weights = {
        "w": rng.normal(0, 0.5, (width, 3, 3, 3)),
        "b": rng.normal(0, 0.1, (width,)),
        "fc": rng.normal(0, 1.0, (width, out_classes)),
        "fc_b": rng.normal(0, 0.1, (out_classes,)),
    }
    initializers = [numpy_helper.from_array(v.astype(compute), k) for k, v in weights.items()]
    if reshape_to_batch:
        if not isinstance(batch, int):
            raise ValueError("reshape_to_batch needs a fixed (int) batch")
        initializers.append(numpy_helper.from_array(np.array([batch, -1], np.int64), "flat_shape"))
    nodes = []
    current = "x"
    if elem in (TensorProto.UINT8, TensorProto.INT32):
        nodes.append(helper.make_node("Cast", [current], ["x_float"], to=compute_elem))
        current = "x_float"
    if layout == "NHWC":
        nodes.append(helper.make_node("Transpose", [current], ["x_nchw"], perm=[0, 3, 1, 2]))
        current = "x_nchw"
    nodes += [
        helper.make_node("Conv", [current, "w", "b"], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("GlobalAveragePool", ["relu"], ["pool"]),
        helper.make_node("Reshape", ["pool", "flat_shape"], ["flat"])
        if reshape_to_batch
        else helper.make_node("Flatten", ["pool"], ["flat"]),
        helper.make_node("Gemm", ["flat", "fc", "fc_b"], ["logits" if softmax else "y"]),
    ]
    if softmax:
        nodes.append(helper.make_node("Softmax", ["logits"], ["y"], axis=1))
    h = size if height is None else height
    shape = [batch, h, size, 3] if layout == "NHWC" else [batch, 3, h, size]
    graph = helper.make_graph(
        nodes,
        "tiny_convnet",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", compute_elem, [batch, classes])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = min(model.ir_version, 8)  # what torch's exporter writes at opset 18
    onnx.checker.check_model(model)
    return model
