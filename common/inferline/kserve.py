"""KServe v2 tensors <-> numpy, for servicers built on tritonclient's generated protocol.

Inputs may arrive as ``raw_input_contents`` (what tritonclient sends) or typed ``contents``;
outputs are always written as ``raw_output_contents``. BYTES elements are length-prefixed
(4-byte little endian), as in Triton.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import service_pb2
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from inferline import tensors
from inferline.errors import invalid

InferTensor = service_pb2.ModelInferRequest.InferInputTensor


def split_bytes(buffer: bytes) -> list[bytes]:
    """Decode Triton's length-prefixed BYTES encoding; raises InferError when malformed."""
    try:
        return tensors.split_bytes(buffer)
    except tensors.TensorError as exc:
        raise invalid(str(exc)) from None


join_bytes = tensors.join_bytes


def np_dtype(datatype: str) -> np.dtype[np.generic]:
    dtype = triton_to_np_dtype(datatype)
    if dtype is None:
        raise invalid(f"unknown datatype {datatype!r}")
    return np.dtype(dtype)


def input_array(request: service_pb2.ModelInferRequest, index: int) -> npt.NDArray[np.generic]:
    """The ``index``-th input of ``request`` as a numpy array of its declared shape."""
    tensor = request.inputs[index]
    shape = tuple(int(d) for d in tensor.shape)
    try:
        count = tensors.check_shape(shape)
    except tensors.TensorError as exc:
        raise invalid(f"input {tensor.name!r}: {exc}") from None
    if index < len(request.raw_input_contents):
        raw = request.raw_input_contents[index]
        if tensor.datatype == "BYTES":
            array: npt.NDArray[np.generic] = np.array(split_bytes(raw) or [], dtype=np.object_)
        else:
            dtype = np_dtype(tensor.datatype)
            if len(raw) != count * dtype.itemsize:
                raise invalid(
                    f"input {tensor.name!r}: {len(raw)} bytes do not match shape {list(shape)} "
                    f"of {tensor.datatype} ({count * dtype.itemsize} bytes expected)"
                )
            array = np.frombuffer(raw, dtype=dtype)
    else:
        if tensor.datatype not in tensors.CONTENTS:
            raise invalid(f"input {tensor.name!r}: datatype {tensor.datatype!r} is not supported")
        field = tensors.CONTENTS[tensor.datatype][0]
        values = list(getattr(tensor.contents, field))
        if tensor.datatype == "BYTES":
            array = np.array(values, dtype=np.object_)
        else:
            _check_range(tensor.name, tensor.datatype, field, values)
            array = np.array(values, dtype=np_dtype(tensor.datatype))
    if array.size != count:
        raise invalid(
            f"input {tensor.name!r}: {array.size} elements do not match shape {list(shape)}"
        )
    return array.reshape(shape)


def _check_range(name: str, datatype: str, field: str, values: list[int]) -> None:
    """Typed contents are wider than INT8, INT16, UINT8 and UINT16 (``int_contents`` holds int32
    values): refuse a value that would wrap rather than change it."""
    dtype: np.dtype[Any] = np_dtype(datatype)
    value = tensors.outside(values, dtype)
    if value is not None:
        info = np.iinfo(dtype)
        raise invalid(
            f"input {name!r}: {field} holds {value}, outside {datatype} [{info.min}, {info.max}]"
        )


def find_input(
    request: service_pb2.ModelInferRequest, name: str, datatype: str, hint: str
) -> npt.NDArray[np.generic]:
    """The input called ``name``, checked for ``datatype``; ``hint`` describes what is expected."""
    names = [t.name for t in request.inputs]
    if name not in names:
        got = ", ".join(repr(n) for n in names) or "no inputs"
        raise invalid(f"model {request.model_name!r} expects input {name!r} ({hint}); got {got}")
    index = names.index(name)
    if request.inputs[index].datatype != datatype:
        raise invalid(
            f"input {name!r} must be {datatype} ({hint}); got {request.inputs[index].datatype}"
        )
    return input_array(request, index)


def find_batch(
    request: service_pb2.ModelInferRequest, name: str, hint: str, max_batch: int
) -> list[bytes]:
    """BYTES input ``name`` of shape [N, 1] or [N], 1 <= N <= ``max_batch``, as a list.

    A batching model whose configuration says ``dims: [1]`` takes ``[N, 1]`` on Triton, and
    that is what a client building its request from the configuration sends; ``[N]`` is the
    shape most clients send for a list of files, and is accepted too.
    """
    items = find_input(request, name, "BYTES", hint)
    if items.ndim == 2 and items.shape[1] == 1:
        items = items.reshape(-1)
    if items.ndim != 1 or not 0 < items.shape[0] <= max_batch:
        raise invalid(
            f"input {name!r} must have shape [N, 1] or [N] with 1 <= N <= {max_batch} "
            f"(max_batch); got {list(items.shape)}"
        )
    return list(items)


def add_output(
    response: service_pb2.ModelInferResponse, name: str, array: npt.NDArray[np.generic]
) -> None:
    """Append ``array`` to ``response`` as output ``name`` (raw contents)."""
    tensor = response.outputs.add()
    tensor.name = name
    tensor.shape.extend(array.shape)
    if array.dtype == np.object_:
        tensor.datatype = "BYTES"
        items = (x if isinstance(x, bytes) else str(x).encode() for x in array.ravel())
        response.raw_output_contents.append(join_bytes(items))
    else:
        tensor.datatype = np_to_triton_dtype(array.dtype)
        response.raw_output_contents.append(np.ascontiguousarray(array).tobytes())


def output_array(response: service_pb2.ModelInferResponse, name: str) -> npt.NDArray[np.generic]:
    """Output ``name`` of ``response`` as numpy (raw contents)."""
    for index, tensor in enumerate(response.outputs):
        if tensor.name == name:
            raw = response.raw_output_contents[index]
            shape = tuple(int(d) for d in tensor.shape)
            if tensor.datatype == "BYTES":
                return np.array(split_bytes(raw), dtype=np.object_).reshape(shape)
            return np.frombuffer(raw, dtype=np_dtype(tensor.datatype)).reshape(shape)
    raise KeyError(name)


def class_count(output: service_pb2.ModelInferRequest.InferRequestedOutputTensor) -> int:
    """The classification extension's ``class_count`` for a requested output (0 when absent)."""
    if "classification" not in output.parameters:
        return 0
    param = output.parameters["classification"]
    kind = param.WhichOneof("parameter_choice")
    value = int(getattr(param, kind)) if kind in ("int64_param", "uint64_param") else -1
    if value < 0:
        raise invalid(f"output {output.name!r}: classification must be a non-negative integer")
    return value


def classify(
    probabilities: npt.NDArray[np.float32], k: int, labels: Sequence[str]
) -> npt.NDArray[np.object_]:
    """Top-``k`` of each row as Triton's classification strings ``b"score:index:label"``."""
    k = min(k, probabilities.shape[-1])
    top = np.argsort(-probabilities, axis=-1, kind="stable")[..., :k]
    rows = [
        [f"{row[i]:f}:{i}:{labels[i] if i < len(labels) else ''}".encode() for i in indices]
        for row, indices in zip(probabilities, top, strict=True)
    ]
    return np.array(rows, dtype=np.object_).reshape(probabilities.shape[0], k)


def parameters(
    message: service_pb2.ModelInferRequest | service_pb2.ModelInferResponse,
) -> dict[str, bool | int | float | str]:
    """A request's (or response's) ``parameters`` map as plain Python values."""
    values: dict[str, bool | int | float | str] = {}
    for key, param in message.parameters.items():
        kind = param.WhichOneof("parameter_choice")
        if kind is not None:
            values[key] = getattr(param, kind)
    return values


def set_parameters(target: Any, values: Mapping[str, object], what: str = "parameter") -> None:
    """Set ``values`` in ``target``, a ``map<string, InferParameter>`` (a message's
    ``parameters``), each in its own kind: the inverse of :func:`parameters`. A value that is
    no bool, int64, double or string is INVALID_ARGUMENT, named as ``what`` and its key."""
    for key, value in values.items():
        param = target[key]
        if isinstance(value, bool):  # before int: a bool is an int too
            param.bool_param = value
        elif isinstance(value, int):
            if not -tensors.INT64_MAX - 1 <= value <= tensors.INT64_MAX:
                raise invalid(f"{what} {key!r} is {value}: an integer must fit in 64 bits (signed)")
            param.int64_param = value
        elif isinstance(value, float):
            param.double_param = value
        elif isinstance(value, str):
            param.string_param = value
        else:
            raise invalid(f"{what} {key!r} must be a boolean, number or string, not {kind(value)}")


def kind(value: object) -> str:
    """What a JSON value is, in words."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    return names.get(type(value), "a number" if isinstance(value, int | float) else "that")
