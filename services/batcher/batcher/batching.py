"""The pure core of the batcher: which requests may share a batch, merging, splitting.

KServe v2 messages in, KServe v2 messages out; no gRPC here. Tensors stay as the raw bytes they
arrived in: merging along dim 0 is a concatenation of each input's raw contents (for BYTES too,
whose length-prefixed elements concatenate to a valid tensor), and splitting slices each
output's raw contents at item boundaries.

A request that cannot safely share a batch (no batch dimension, inconsistent sizes, shared
memory, sequence parameters, larger than a batch, ...) gets no key and travels alone, unchanged,
so the upstream answers it exactly as it would have without the batcher.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
from tritonclient.grpc import service_pb2

from inferline import tensors
from inferline.tensors import ITEM_BYTES, bytes_offsets, elements

Request: TypeAlias = service_pb2.ModelInferRequest
Response: TypeAlias = service_pb2.ModelInferResponse
InputTensor: TypeAlias = service_pb2.ModelInferRequest.InferInputTensor


# Triton's sequence batcher routes by these: two steps of a sequence must never be merged.
_SEQUENCE_PARAMETERS = frozenset({"sequence_id", "sequence_start", "sequence_end"})
_SHARED_MEMORY_PARAMETER = "shared_memory_region"


class SplitError(ValueError):
    """The upstream's answer to a merged batch cannot be split back (its shapes do not match)."""


@dataclass(frozen=True)
class Plan:
    """How a request may be batched: ``key`` (None: alone), ``items`` along dim 0, and why."""

    key: Hashable | None
    items: int
    reason: str = ""


def parameters_key(parameters: object) -> tuple[tuple[str, bytes], ...]:
    """A hashable, order-independent form of a KServe ``parameters`` map."""
    items = parameters.items()  # type: ignore[attr-defined]
    return tuple(sorted((name, value.SerializeToString()) for name, value in items))


def _typed_ok(tensor: InputTensor) -> bool:
    count = elements(tensor.shape)
    if tensor.datatype == "BYTES":
        return len(tensor.contents.bytes_contents) == count
    field = tensors.CONTENTS.get(tensor.datatype)
    if field is None:
        return False
    values = getattr(tensor.contents, field[0])
    # Merging converts typed contents to raw bytes: a value that would wrap there travels
    # alone, to be answered by the upstream as it is.
    return len(values) == count and tensors.outside(values, np.dtype(field[1])) is None


def plan(request: Request, max_batch_size: int) -> Plan:
    """The batch key of ``request`` (or none: it travels alone) and its size along dim 0."""
    if max_batch_size < 1:
        return Plan(None, 0, "the model does not batch (max_batch_size 0)")
    if not request.inputs:
        return Plan(None, 0, "no inputs")
    if any(name in _SEQUENCE_PARAMETERS for name in request.parameters):
        return Plan(None, 0, "a step of a sequence")
    raw = len(request.raw_input_contents)
    if raw not in (0, len(request.inputs)):
        return Plan(None, 0, "raw_input_contents do not match the inputs")
    items = {t.shape[0] if t.shape else -1 for t in request.inputs}
    if len(items) != 1 or (size := items.pop()) < 1:
        return Plan(None, 0, "inputs disagree on dim 0, or have none")
    if size > max_batch_size:
        return Plan(None, size, f"{size} items is more than a batch ({max_batch_size})")
    inputs = []
    for index, tensor in enumerate(request.inputs):
        if tensor.datatype not in tensors.DATATYPES:
            return Plan(None, size, f"input {tensor.name!r}: unknown datatype")
        if _SHARED_MEMORY_PARAMETER in tensor.parameters:
            return Plan(None, size, f"input {tensor.name!r} is in shared memory")
        if any(d < 0 for d in tensor.shape):
            return Plan(None, size, f"input {tensor.name!r}: negative dimension")
        if not (
            tensors.raw_fits(tensor.datatype, tensor.shape, request.raw_input_contents[index])
            if raw
            else _typed_ok(tensor)
        ):
            return Plan(None, size, f"input {tensor.name!r}: contents do not match its shape")
        inputs.append(
            (
                tensor.name,
                tensor.datatype,
                tuple(tensor.shape[1:]),
                parameters_key(tensor.parameters),
            )
        )
    if len({name for name, *_ in inputs}) != len(inputs):
        return Plan(None, size, "an input is given twice")
    outputs = []
    for output in request.outputs:
        if _SHARED_MEMORY_PARAMETER in output.parameters:
            return Plan(None, size, f"output {output.name!r} is in shared memory")
        outputs.append((output.name, parameters_key(output.parameters)))
    key = (
        request.model_name,
        request.model_version,
        tuple(sorted(inputs)),
        tuple(outputs),
        parameters_key(request.parameters),
    )
    return Plan(key, size)


def raw_contents(request: Request, index: int) -> bytes:
    """Input ``index`` of ``request`` as raw bytes, whether it came raw or as typed contents."""
    if request.raw_input_contents:
        return bytes(request.raw_input_contents[index])
    tensor = request.inputs[index]
    if tensor.datatype == "BYTES":
        return tensors.join_bytes(tensor.contents.bytes_contents)
    field, dtype = tensors.CONTENTS[tensor.datatype]
    return np.asarray(getattr(tensor.contents, field), dtype=dtype).tobytes()


def merge(requests: Sequence[Request], raws: Sequence[bytes] | None = None) -> bytes:
    """One serialized request holding ``requests`` (same key) along dim 0, in order.

    ``raws``: how each request arrived. Their raw input contents then go into the merged
    request as views of those bytes, copied once, into the merged message itself: no message per
    request is built or serialized again (:func:`raw_input_views`)."""
    first = requests[0]
    merged = Request(model_name=first.model_name, model_version=first.model_version)
    _copy_map(first.parameters, merged.parameters)
    merged.outputs.extend(first.outputs)
    total = sum(r.inputs[0].shape[0] for r in requests)
    arrived: Sequence[bytes | None] = raws if raws is not None else [None] * len(requests)
    views = [_views(r, raw) for r, raw in zip(requests, arrived, strict=True)]
    contents: list[bytes | memoryview] = []
    for tensor in first.inputs:
        out = merged.inputs.add(name=tensor.name, datatype=tensor.datatype)
        out.shape.extend([total, *tensor.shape[1:]])
        _copy_map(tensor.parameters, out.parameters)
        parts = []
        for request, raw_views in zip(requests, views, strict=True):
            index = _input_index(request, tensor.name)
            parts.append(raw_contents(request, index) if raw_views is None else raw_views[index])
        contents += (_RAW_INPUT_TAG, _varint(sum(map(len, parts))), *parts)
    return b"".join([merged.SerializeToString(), *contents])


# ModelInferRequest.raw_input_contents: field 7, length-delimited.
_RAW_INPUT_FIELD = 7
_RAW_INPUT_TAG = bytes([_RAW_INPUT_FIELD << 3 | 2])


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _read_varint(data: memoryview, offset: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if offset >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = data[offset]
        value |= (byte & 0x7F) << shift
        offset, shift = offset + 1, shift + 7
        if not byte & 0x80:
            return value, offset


def _views(request: Request, raw: bytes | None) -> list[memoryview] | None:
    """``request``'s raw input contents as views of ``raw``, or None where they cannot be had
    (none came raw; wire that only protobuf's own parser reads, such as unknown groups)."""
    if raw is None or not request.raw_input_contents:
        return None
    try:
        views = raw_input_views(raw)
    except ValueError:
        return None
    return views if len(views) == len(request.raw_input_contents) else None


def raw_input_views(raw: bytes) -> list[memoryview]:
    """The ``raw_input_contents`` of a serialized ModelInferRequest, in order, as views of
    ``raw``: the protobuf wire format's top-level fields read, the others skipped."""
    data, offset, found = memoryview(raw), 0, []
    while offset < len(data):
        key, offset = _read_varint(data, offset)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, offset = _read_varint(data, offset)
        elif wire == 1:
            offset += 8
        elif wire == 5:
            offset += 4
        elif wire == 2:
            length, offset = _read_varint(data, offset)
            if field == _RAW_INPUT_FIELD:
                found.append(data[offset : offset + length])
            offset += length
        else:
            raise ValueError(f"wire type {wire} in a ModelInferRequest")
        if offset > len(data):
            raise ValueError("a field runs past the end of the request")
    return found


def split(response: Response, sizes: Sequence[int], ids: Sequence[str]) -> list[Response]:
    """The answer of each request of a merged batch: ``sizes[i]`` items, id ``ids[i]``."""
    total = sum(sizes)
    if len(response.raw_output_contents) != len(response.outputs):
        raise SplitError(
            f"{len(response.outputs)} outputs came with {len(response.raw_output_contents)} raw "
            "contents; the batcher needs every output as raw contents"
        )
    parts = [
        Response(model_name=response.model_name, model_version=response.model_version, id=i)
        for i in ids
    ]
    for part in parts:
        _copy_map(response.parameters, part.parameters)
    for tensor, raw in zip(response.outputs, response.raw_output_contents, strict=True):
        if not tensor.shape or tensor.shape[0] != total:
            raise SplitError(
                f"output {tensor.name!r} has shape {list(tensor.shape)}; a batch of {total} items "
                f"needs [{total}, ...]"
            )
        bounds = _item_bounds(tensor.name, tensor.datatype, list(tensor.shape), bytes(raw))
        start = 0
        for part, size in zip(parts, sizes, strict=True):
            out = part.outputs.add(name=tensor.name, datatype=tensor.datatype)
            out.shape.extend([size, *tensor.shape[1:]])
            _copy_map(tensor.parameters, out.parameters)
            part.raw_output_contents.append(raw[bounds[start] : bounds[start + size]])
            start += size
    return parts


def _item_bounds(name: str, datatype: str, shape: list[int], raw: bytes) -> list[int]:
    """Byte offset where each item (index along dim 0) of a raw tensor starts, plus the end."""
    per_item = elements(shape[1:])
    if datatype == "BYTES":
        offsets = bytes_offsets(raw, elements(shape))
        if offsets is None:
            raise SplitError(f"output {name!r}: malformed BYTES contents")
        return offsets[::per_item] if per_item else [0] * (shape[0] + 1)
    if datatype not in ITEM_BYTES:
        raise SplitError(f"output {name!r}: unknown datatype {datatype!r}")
    step = per_item * ITEM_BYTES[datatype]
    if len(raw) != step * shape[0]:
        raise SplitError(f"output {name!r}: {len(raw)} bytes do not match shape {shape}")
    return list(range(0, len(raw) + 1, step)) if step else [0] * (shape[0] + 1)


def _input_index(request: Request, name: str) -> int:
    for index, tensor in enumerate(request.inputs):
        if tensor.name == name:
            return index
    raise KeyError(name)  # same key guarantees the same input names


def _copy_map(source: object, target: object) -> None:
    for name, value in source.items():  # type: ignore[attr-defined]
        target[name].CopyFrom(value)  # type: ignore[index]
