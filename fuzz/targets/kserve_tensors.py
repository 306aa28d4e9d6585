"""kserve-tensors: requests built field by field from the input, through every check the hops
make (:mod:`fuzz.targets.checks`).

Where ``kserve-wire`` mutates protobuf bytes (and spends most inputs on ones that do not parse),
this target spends every input on a well-formed message with hostile contents: the names and
datatypes the services look for, shapes with dimensions up to 2^63 - 1 (and negative ones),
raw contents whose BYTES length prefixes claim up to 4 GiB, typed contents in any field whatever
the datatype, parameters of every kind under the names the services read.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import atheris
from tritonclient.grpc import service_pb2

from fuzz.targets import checks

Request: TypeAlias = service_pb2.ModelInferRequest

MODELS = ("classifier", "classifier_video", "preprocess", "preprocess_video", "m")
NAMES = ("IMAGE", "VIDEO", "PROBABILITIES", "FRAME_INDEX", "TIMESTAMP", "TENSOR", "ERRORS", "")
DATATYPES = (
    "BYTES", "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "BF16", "FP32", "FP64",
)  # fmt: skip
PARAMETERS = (
    "classification", "binary_data", "every_n", "fps", "max_frames", "resize", "crop",
    "sequence_id", "shared_memory_region", "timeout", "priority",
)  # fmt: skip
DIMENSIONS = (0, 1, 2, 3, 64, 65, 224, 2**31, 2**32, 2**32 + 1, 2**62, 2**63 - 1, -1)
CONTENTS = (
    "bool_contents", "int_contents", "int64_contents", "uint_contents", "uint64_contents",
    "fp32_contents", "fp64_contents", "bytes_contents",
)  # fmt: skip
INT32, INT64 = (-(2**31), 2**31 - 1), (-(2**63), 2**63 - 1)


def pick(fdp: Any, values: Sequence[str]) -> str:
    """One of ``values`` mostly, or any text (an unknown name or datatype)."""
    if fdp.ConsumeIntInRange(0, 7):
        return str(fdp.PickValueInList(list(values)))
    return str(fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 8)))


def dimension(fdp: Any) -> int:
    if fdp.ConsumeBool():
        return int(fdp.PickValueInList(list(DIMENSIONS)))
    return int(fdp.ConsumeIntInRange(*INT64))


def add_parameters(fdp: Any, target: Any) -> None:
    for _ in range(fdp.ConsumeIntInRange(0, 3)):
        param = target[pick(fdp, PARAMETERS)]
        kind = fdp.ConsumeIntInRange(0, 4)
        if kind == 0:
            param.bool_param = fdp.ConsumeBool()
        elif kind == 1:
            param.int64_param = fdp.ConsumeIntInRange(*INT64)
        elif kind == 2:
            param.uint64_param = fdp.ConsumeIntInRange(0, 2**64 - 1)
        elif kind == 3:
            param.double_param = fdp.ConsumeFloat()  # NaN and the infinities too
        else:
            param.string_param = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 16))


def bytes_elements(fdp: Any) -> bytes:
    """Length-prefixed BYTES elements; some prefixes tell the truth, some claim up to 4 GiB."""
    parts = []
    for _ in range(fdp.ConsumeIntInRange(0, 4)):
        item = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
        honest = fdp.ConsumeIntInRange(0, 3)
        length = len(item) if honest else fdp.ConsumeIntInRange(0, 2**32 - 1)
        parts.append(struct.pack("<I", length) + item)
    return b"".join(parts)


def add_contents(fdp: Any, tensor: Any) -> None:
    """Typed contents: the datatype's own field mostly, any field sometimes."""
    field = {
        "BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
        "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
        "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
        "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
    }.get(tensor.datatype, "")  # fmt: skip
    if not field or not fdp.ConsumeIntInRange(0, 5):
        field = fdp.PickValueInList(list(CONTENTS))
    count = fdp.ConsumeIntInRange(0, 8)
    values: list[Any]
    if field == "bool_contents":
        values = [fdp.ConsumeBool() for _ in range(count)]
    elif field == "int_contents":
        values = fdp.ConsumeIntListInRange(count, *INT32)
    elif field == "int64_contents":
        values = fdp.ConsumeIntListInRange(count, *INT64)
    elif field == "uint_contents":
        values = fdp.ConsumeIntListInRange(count, 0, 2**32 - 1)
    elif field == "uint64_contents":
        values = fdp.ConsumeIntListInRange(count, 0, 2**64 - 1)
    elif field in ("fp32_contents", "fp64_contents"):
        values = [fdp.ConsumeFloat() for _ in range(count)]  # protobuf rounds to float32
    else:
        values = [fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64)) for _ in range(count)]
    getattr(tensor.contents, field).extend(values)


def build(data: bytes) -> Request:
    fdp = atheris.FuzzedDataProvider(data)
    request = Request(model_name=pick(fdp, MODELS))
    request.id = fdp.ConsumeUnicodeNoSurrogates(fdp.ConsumeIntInRange(0, 8))
    add_parameters(fdp, request.parameters)
    raw = fdp.ConsumeIntInRange(0, 3) > 0  # raw contents, as tritonclient sends them, mostly
    for _ in range(fdp.ConsumeIntInRange(0, 3)):
        tensor = request.inputs.add(name=pick(fdp, NAMES), datatype=pick(fdp, DATATYPES))
        tensor.shape.extend(dimension(fdp) for _ in range(fdp.ConsumeIntInRange(0, 4)))
        add_parameters(fdp, tensor.parameters)
        if not raw:
            add_contents(fdp, tensor)
        elif tensor.datatype == "BYTES" and fdp.ConsumeIntInRange(0, 3):
            request.raw_input_contents.append(bytes_elements(fdp))
        else:
            request.raw_input_contents.append(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 256)))
    if raw and fdp.ConsumeIntInRange(0, 15) == 0:  # one raw contents too many
        request.raw_input_contents.append(fdp.ConsumeBytes(8))
    for _ in range(fdp.ConsumeIntInRange(0, 2)):
        output = request.outputs.add(name=pick(fdp, NAMES))
        add_parameters(fdp, output.parameters)
    return request


def one_input(data: bytes) -> None:
    checks.check_request(build(data))


def setup() -> Callable[[bytes], None]:
    return one_input


def seeds() -> dict[str, bytes]:
    """Inputs are choices, not messages: a few fixed byte patterns start the corpus."""
    return {
        "zeros": bytes(64),
        "ones": b"\xff" * 64,
        "counting": bytes(range(256)),
        "image_batch": b"\x01\x00\x00\x01\x01\x00\x00\x00\x00\x02" + bytes(range(40, 120)),
    }
