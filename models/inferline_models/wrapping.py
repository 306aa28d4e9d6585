"""Put the pipeline's wire contract around an image classifier's ONNX graph.

The pipeline sends uint8 RGB NCHW pixels as ``INPUT`` and reads FP32 probabilities as
``PROBS``; a classifier from elsewhere takes its own layout, colour order, normalisation and
dtype, and may answer logits. Rather than rewrite the network, two small graphs are built with
``onnx.helper`` - one before it (pixels to what it takes), one after (what it answers to
probabilities) - and joined to it with ONNX's own composition tools (``onnx.compose``), so the
network's nodes reach Triton exactly as exported, only renamed under a prefix.

No validation here beyond what ``onnx.compose`` checks: the importer decides what is acceptable
(:mod:`inferline_models.input_plan`) and runs the result (:mod:`inferline_models.trial_run`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.compose import add_prefix, merge_models

from inferline_models.repository import INPUT_NAME, OUTPUT_NAME

# The network's names, prefixed, cannot collide with the wrapper's (which all start "inferline/").
NETWORK_PREFIX = "net/"
_PIXELS = "inferline/pixels"  # the pre graph's output: what the network takes
_ANSWER = "inferline/answer"  # the post graph's input: what the network answers
BATCH = "batch"


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """How uint8 RGB NCHW pixels ``x`` become the network's input, in this order.

    ``y = x * scale + offset`` per channel (R, G, B) in float32 (``None``: the network takes
    uint8 pixels as they are), then the channels reordered to BGR, then NCHW -> NHWC, then a
    cast to the network's dtype.
    """

    size: int
    scale: tuple[float, float, float] | None
    offset: tuple[float, float, float] | None
    bgr: bool
    nhwc: bool
    dtype: int  # onnx.TensorProto element type of the network's input

    def steps(self) -> list[str]:
        """The steps, in words, for progress lines and the model card."""
        steps = []
        if self.scale is not None and self.offset is not None:
            steps.append(f"x*{_triple(self.scale)} + {_triple(self.offset)}".replace("+ -", "- "))
        if self.bgr:
            steps.append("RGB->BGR")
        if self.nhwc:
            steps.append("NCHW->NHWC")
        if self.dtype not in (TensorProto.UINT8, TensorProto.FLOAT):
            steps.append(f"cast to {onnx.helper.tensor_dtype_to_np_dtype(self.dtype).name}")
        return steps


def wrap_classifier(
    network: onnx.ModelProto, pre: Preprocessing, *, softmax: bool
) -> onnx.ModelProto:
    """``network`` (one image input, one ``[batch, classes]`` output) between the pre graph and
    a post graph (cast to float32, Softmax when it answers logits): ``INPUT`` -> ``PROBS``.

    The wrapper graphs import the network's own default-domain opset and IR version, which
    ``merge_models`` requires.
    """
    (net_in,) = network.graph.input
    (net_out,) = network.graph.output
    opset = default_opset(network)
    prefixed = add_prefix(network, NETWORK_PREFIX)
    merged = merge_models(
        _model(_pre_graph(pre), network, opset),
        prefixed,
        io_map=[(_PIXELS, NETWORK_PREFIX + net_in.name)],
    )
    post = _model(_post_graph(net_out.type.tensor_type, softmax=softmax), network, opset)
    merged = merge_models(merged, post, io_map=[(NETWORK_PREFIX + net_out.name, _ANSWER)])
    _dedupe_opsets(merged)
    merged.graph.name = "inferline_classifier"
    merged.producer_name = "inferline_models"
    return merged


def default_opset(model: onnx.ModelProto) -> int:
    """The model's version of the default ONNX operator set (0 when it imports none)."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _model(graph: onnx.GraphProto, like: onnx.ModelProto, opset: int) -> onnx.ModelProto:
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        ir_version=like.ir_version,
        producer_name="inferline_models",
    )


def _pre_graph(pre: Preprocessing) -> onnx.GraphProto:
    nodes: list[onnx.NodeProto] = []
    current = INPUT_NAME

    def add(op: str, *inputs: str, **attributes: Any) -> None:
        nonlocal current
        name = f"inferline/pre/{len(nodes)}_{op.lower()}"
        nodes.append(helper.make_node(op, [current, *inputs], [name], name=name, **attributes))
        current = name

    def constant(name: str, array: np.ndarray) -> str:  # type: ignore[type-arg]
        out = f"inferline/pre/{name}"
        tensor = numpy_helper.from_array(array, out)
        nodes.append(helper.make_node("Constant", [], [out], name=out, value=tensor))
        return out

    if pre.scale is not None and pre.offset is not None:
        add("Cast", to=TensorProto.FLOAT)
        add("Mul", constant("scale", _per_channel(pre.scale)))
        add("Add", constant("offset", _per_channel(pre.offset)))
    if pre.bgr:
        add("Gather", constant("bgr", np.array([2, 1, 0], dtype=np.int64)), axis=1)
    if pre.nhwc:
        add("Transpose", perm=[0, 2, 3, 1])
    if pre.scale is not None and pre.dtype != TensorProto.FLOAT:
        add("Cast", to=pre.dtype)
    nodes.append(helper.make_node("Identity", [current], [_PIXELS], name="inferline/pre/out"))
    side = pre.size
    out_shape: list[str | int] = [BATCH, side, side, 3] if pre.nhwc else [BATCH, 3, side, side]
    return helper.make_graph(
        nodes,
        "inferline_pre",
        [helper.make_tensor_value_info(INPUT_NAME, TensorProto.UINT8, [BATCH, 3, side, side])],
        [helper.make_tensor_value_info(_PIXELS, pre.dtype, out_shape)],
    )


def _post_graph(answer: onnx.TypeProto.Tensor, *, softmax: bool) -> onnx.GraphProto:
    nodes: list[onnx.NodeProto] = []
    current = _ANSWER
    if answer.elem_type != TensorProto.FLOAT:
        nodes.append(helper.make_node("Cast", [current], ["inferline/post/float"], to=1))
        current = "inferline/post/float"
    if softmax:
        nodes.append(helper.make_node("Softmax", [current], ["inferline/post/softmax"], axis=1))
        current = "inferline/post/softmax"
    nodes.append(helper.make_node("Identity", [current], [OUTPUT_NAME]))
    for i, node in enumerate(nodes):
        node.name = f"inferline/post/{i}_{node.op_type.lower()}"
    classes = _dim(answer.shape.dim[1])
    return helper.make_graph(
        nodes,
        "inferline_post",
        [helper.make_tensor_value_info(_ANSWER, answer.elem_type, [BATCH, classes])],
        [helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [BATCH, classes])],
    )


def _dim(dim: onnx.TensorShapeProto.Dimension) -> int | str | None:
    if dim.HasField("dim_value"):
        return int(dim.dim_value)
    return dim.dim_param or None


def _per_channel(values: tuple[float, float, float]) -> np.ndarray:  # type: ignore[type-arg]
    return np.asarray(values, dtype=np.float32).reshape(1, 3, 1, 1)


def _triple(values: tuple[float, float, float]) -> str:
    if len(set(values)) == 1:
        return f"{values[0]:.6g}"
    return "(" + ", ".join(f"{v:.6g}" for v in values) + ")"


def _dedupe_opsets(model: onnx.ModelProto) -> None:
    """merge_models lists a domain once per model it joined; keep each domain once."""
    seen: dict[str, int] = {}
    for entry in model.opset_import:
        seen.setdefault(entry.domain, entry.version)
    del model.opset_import[:]
    model.opset_import.extend(helper.make_opsetid(d, v) for d, v in seen.items())
