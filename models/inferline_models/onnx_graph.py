"""The user's ONNX graph: read and checked, reshaped for the wrapping, described in words.

:func:`load_network` finds the graph's one image input and one output (dropping weights that
old exporters list as inputs); :func:`make_batch_dynamic` turns a fixed batch axis into
``batch``. The ``show_*`` helpers describe tensors as a refusal names them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto

from inferline_models.import_settings import ModelImportError
from inferline_models.wrapping import BATCH, default_opset

MIN_OPSET = 7  # per-channel Mul/Add broadcasting; Cast's numeric "to"


@dataclasses.dataclass(frozen=True)
class Network:
    """The user's graph, read and checked: its one input and one output."""

    path: Path
    model: onnx.ModelProto
    input: onnx.ValueInfoProto
    output: onnx.ValueInfoProto
    fixed_batch: int | None  # the input's batch size when the graph fixes one
    description: str  # its input and output as the file has them, for a progress line


def load_network(path: Path) -> Network:
    """Read ``path``; its graph must have exactly one input and one output."""
    try:
        model = onnx.load(str(path))
    except DecodeError as exc:
        raise ModelImportError(f"{path} is not an ONNX model: {exc}") from exc
    except OSError as exc:
        raise ModelImportError(f"cannot read {path}: {exc}") from exc
    if not model.ir_version or not model.graph.node:
        raise ModelImportError(f"{path} is not an ONNX model: no IR version or no graph nodes")
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as exc:
        raise ModelImportError(f"{path} is not a valid ONNX model: {exc}") from exc
    opset = default_opset(model)
    if opset < MIN_OPSET:
        raise ModelImportError(
            f"{path} uses ONNX opset {opset}; the import path needs opset >= {MIN_OPSET}: "
            "re-export it with a newer opset"
        )
    model = _without_initializer_inputs(model)
    inputs, outputs = list(model.graph.input), list(model.graph.output)
    if len(inputs) != 1:
        raise ModelImportError(
            f"{path} has {len(inputs)} inputs ({_names(inputs)}); the import path takes "
            "exactly one image input"
        )
    if len(outputs) != 1:
        raise ModelImportError(
            f"{path} has {len(outputs)} outputs ({_names(outputs)}); the import path takes "
            "exactly one output of class scores [batch, classes]"
        )
    description = (
        f"input {show_tensor(inputs[0])}, output {show_tensor(outputs[0])}; "
        f"opset {opset}, IR version {model.ir_version}"
    )
    dims = dims_of(inputs[0])
    fixed_batch = dims[0] if dims and isinstance(dims[0], int) else None
    return Network(path, model, inputs[0], outputs[0], fixed_batch, description)


def make_batch_dynamic(model: onnx.ModelProto) -> None:
    """Turn a fixed batch axis of the input and output into ``batch``.

    Shapes recorded for intermediate values would still say the old batch: they are dropped
    (ONNX Runtime infers them again). Whether the graph itself assumes the old batch (a
    hard-coded Reshape) only a run with another batch size tells.
    """
    changed = False
    for value in (*model.graph.input, *model.graph.output):
        shape = value.type.tensor_type.shape
        if shape.dim and shape.dim[0].HasField("dim_value"):
            shape.dim[0].dim_param = BATCH  # clears dim_value (a oneof)
            changed = True
    if changed:
        del model.graph.value_info[:]


def dims_of(value: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """The dims (int, a symbolic name, or None for unknown); None when the rank is unknown."""
    tensor = value.type.tensor_type
    if not tensor.HasField("shape"):
        return None
    return [
        int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None)
        for d in tensor.shape.dim
    ]


def show_tensor(value: onnx.ValueInfoProto) -> str:
    """Name, element type and shape, as a refusal names a tensor: ``'x' FLOAT [N, 3, 16, 16]``."""
    dims = dims_of(value)
    shape = "?" if dims is None else "[" + ", ".join(show_dim(d) for d in dims) + "]"
    return f"'{value.name}' {type_name(value.type.tensor_type.elem_type)} {shape}"


def show_dim(dim: int | str | None) -> str:
    return "?" if dim is None else str(dim)


def show_rank(dims: Sequence[object] | None) -> str:
    return "unknown" if dims is None else str(len(dims))


def type_name(elem_type: int) -> str:
    return str(TensorProto.DataType.Name(elem_type))


def _names(values: Sequence[onnx.ValueInfoProto]) -> str:
    return ", ".join(f"'{v.name}'" for v in values)


def _without_initializer_inputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Old exporters list weights as graph inputs too; they are not inputs to feed."""
    weights = {i.name for i in model.graph.initializer}
    if not any(i.name in weights for i in model.graph.input):
        return model
    if model.ir_version < 4:  # from IR 4 an initializer need not be an input
        model.ir_version = 4
    kept = [i for i in model.graph.input if i.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model
