"""The KServe v2 tensor rules, once: datatypes and their sizes, BYTES framing, element counts,
what typed values a datatype holds. numpy only (no gRPC, no protobuf): :mod:`inferline.kserve`,
the REST codec (:mod:`inferline.kserve_rest`) and the batcher's merge all check by these.

BYTES elements are length-prefixed (a 4-byte little-endian length, then the bytes), as in Triton;
a tensor's elements are concatenated, so two BYTES tensors concatenate to a valid one.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

# Bytes per element of each fixed-size datatype; BYTES is length-prefixed.
ITEM_BYTES = {
    "BOOL": 1, "UINT8": 1, "INT8": 1, "UINT16": 2, "INT16": 2, "FP16": 2, "BF16": 2,
    "UINT32": 4, "INT32": 4, "FP32": 4, "UINT64": 8, "INT64": 8, "FP64": 8,
}  # fmt: skip
DATATYPES = (*ITEM_BYTES, "BYTES")

# The typed ``contents`` field of each datatype (FP16 and BF16 travel only as raw bytes), and
# the numpy type its values are held in.
CONTENTS = {
    "BOOL": ("bool_contents", np.bool_),
    "UINT8": ("uint_contents", np.uint8),
    "UINT16": ("uint_contents", np.uint16),
    "UINT32": ("uint_contents", np.uint32),
    "UINT64": ("uint64_contents", np.uint64),
    "INT8": ("int_contents", np.int8),
    "INT16": ("int_contents", np.int16),
    "INT32": ("int_contents", np.int32),
    "INT64": ("int64_contents", np.int64),
    "FP32": ("fp32_contents", np.float32),
    "FP64": ("fp64_contents", np.float64),
    "BYTES": ("bytes_contents", np.object_),
}

MAX_BYTES = int(np.iinfo(np.intp).max)  # the largest numpy array
INT64_MAX = 2**63 - 1  # shapes and integer parameters are int64 in the protocol
WIDEST = 8  # bytes of the widest element: INT64, FP64, the object pointer of a BYTES element


class TensorError(ValueError):
    """A tensor breaks the rules; the message says how."""


def elements(shape: Sequence[int]) -> int:
    return math.prod(shape)


def check_shape(shape: Sequence[int]) -> int:
    """The element count of ``shape``; TensorError for a negative dimension, or a shape larger
    than any tensor could be. Counted exactly: np.prod in int64 wraps (2^32 x 2^32 is 0, which
    an empty tensor would match), and numpy refuses a shape whose non-zero dimensions, times the
    element's size, pass its index range, even for an empty array."""
    if any(d < 0 for d in shape):
        raise TensorError(f"negative dimension in shape {list(shape)}")
    if math.prod(d for d in shape if d) * WIDEST > MAX_BYTES:
        raise TensorError(f"shape {list(shape)} is larger than any tensor")
    return math.prod(shape)


def bytes_offsets(buffer: bytes, count: int) -> list[int] | None:
    """Offsets of the ``count`` length-prefixed elements of ``buffer`` plus its end, or None
    when ``buffer`` is not exactly ``count`` elements."""
    offsets, offset, size = [0], 0, len(buffer)
    for _ in range(count):
        if offset + 4 > size:
            return None
        (length,) = struct.unpack_from("<I", buffer, offset)
        offset += 4 + length
        if offset > size:
            return None
        offsets.append(offset)
    return offsets if offset == size else None


def split_bytes(buffer: bytes) -> list[bytes]:
    """The elements of a BYTES tensor's raw contents; TensorError when malformed."""
    items: list[bytes] = []
    offset, view = 0, memoryview(buffer)
    while offset < len(view):
        if offset + 4 > len(view):
            raise TensorError("malformed BYTES tensor: a length prefix is cut short")
        (length,) = struct.unpack_from("<I", view, offset)
        offset += 4
        if offset + length > len(view):
            raise TensorError(
                f"malformed BYTES tensor: element {len(items)} claims {length} bytes, "
                f"{len(view) - offset} remain"
            )
        items.append(bytes(view[offset : offset + length]))
        offset += length
    return items


def join_bytes(items: Iterable[bytes | memoryview]) -> bytes:
    """Length-prefixed elements, as a BYTES tensor's raw contents: each item copied once."""
    parts: list[bytes | memoryview] = []
    for item in items:
        parts += (struct.pack("<I", len(item)), item)
    return b"".join(parts)


def raw_fits(datatype: str, shape: Sequence[int], raw: bytes) -> bool:
    """Whether ``raw`` holds exactly the elements of ``shape`` of ``datatype``."""
    if datatype == "BYTES":
        return bytes_offsets(raw, elements(shape)) is not None
    return len(raw) == elements(shape) * ITEM_BYTES[datatype]


def outside(values: Sequence[Any] | npt.NDArray[Any], dtype: np.dtype[Any]) -> Any | None:
    """A value of ``values`` that ``dtype`` cannot hold as it is (an integer type's range: typed
    ``int_contents`` holds int32 values for INT8 and INT16, ``uint_contents`` for UINT8 and
    UINT16), or None when every one fits. Converting instead would wrap it silently."""
    if dtype.kind not in "iu" or not len(values):
        return None
    info = np.iinfo(dtype)
    low, high = min(values), max(values)
    if low < info.min:
        return low
    if high > info.max:
        return high
    return None
