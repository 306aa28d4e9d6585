"""rest: a KServe v2 REST infer body -> :func:`inferline.kserve_rest.parse_infer` -> the checks
a gRPC request gets (:mod:`fuzz.targets.checks`); a response that echoes the request's tensors
goes through :func:`~inferline.kserve_rest.infer_response` and reads back as sent.

An input is the body alone when it starts with ``{``; otherwise its first line is the
``Inference-Header-Content-Length`` header's value and the rest is the body (JSON header, then
the binary tensor data).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import service_pb2

from fuzz.targets import checks
from inferline import kserve, kserve_rest
from inferline.errors import InferError

MODEL = "classifier"


def split_input(data: bytes) -> tuple[bytes, str | None]:
    """The body, and the header's value (None: no header)."""
    if data.startswith(b"{") or b"\n" not in data:
        return data, None
    line, body = data.split(b"\n", 1)
    return body, line.decode("latin-1")  # how an HTTP server hands a header's bytes over


def one_input(data: bytes) -> None:
    body, header_length = split_input(data)
    try:
        parsed = kserve_rest.parse_infer(body, header_length, MODEL)
    except InferError as exc:
        assert exc.message
        return
    request = parsed.message
    assert request.model_name == MODEL
    checks.check_request(request)
    echo(parsed)


def echo(parsed: kserve_rest.InferRequest) -> None:
    """Every input the tensor parser accepts, answered as an output of the same name, through
    ``infer_response`` and back: what the client reads is what it sent."""
    request = parsed.message
    response = service_pb2.ModelInferResponse(model_name=MODEL, model_version="1", id=request.id)
    sent = []
    for index, tensor in enumerate(request.inputs):
        try:
            array = kserve.input_array(request, index)
        except InferError:
            continue
        raw = request.raw_input_contents[index]
        response.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        response.raw_output_contents.append(raw)
        sent.append((raw, array))
    content, header_length = kserve_rest.infer_response(response, parsed)
    head = content if header_length is None else content[:header_length]
    binary = b"" if header_length is None else content[header_length:]
    document = json.loads(head)
    assert document["model_name"] == MODEL
    assert document.get("id", "") == request.id
    offset = 0
    for output, (raw, array) in zip(document["outputs"], sent, strict=True):
        assert output["shape"] == list(array.shape)
        size = output.get("parameters", {}).get("binary_data_size")
        if size is None:
            same(output["data"], array)
        else:
            assert parsed.binary(output["name"])
            assert binary[offset : offset + size] == raw, output
            offset += size
    assert offset == len(binary)


def same(data: list[Any], array: npt.NDArray[Any]) -> None:
    """JSON ``data`` holds ``array``'s values (BYTES: those that are UTF-8 text)."""
    assert len(data) == array.size, (data, array.shape)
    if array.dtype == np.object_:
        for item, original in zip(data, array.flat, strict=True):
            if utf8(original):
                assert item == original.decode()
    elif array.dtype.kind in "iub":
        assert data == array.ravel().tolist(), (data, array)
    else:  # FP16, BF16, FP32, FP64: every one exact as a double
        values = np.asarray(data, dtype=np.float64)
        assert np.array_equal(values, array.ravel().astype(np.float64), equal_nan=True)


def utf8(item: bytes) -> bool:
    try:
        item.decode()
    except UnicodeDecodeError:
        return False
    return True


def setup() -> Callable[[bytes], None]:
    return one_input


def _json(document: dict[str, Any]) -> bytes:
    return json.dumps(document).encode()


def seeds() -> dict[str, bytes]:
    """REST bodies as clients send them: JSON data, BYTES as base64, binary tensors, the
    classification extension, binary outputs."""
    from inferline_testing import media

    jpeg = media.encode(media.photo_at("chelsea", 32, 24), "JPEG", quality=80)
    png = media.encode(media.photo_at("chelsea", 16, 12), "PNG")
    b64 = base64.b64encode(jpeg).decode()
    image = {"name": "IMAGE", "datatype": "BYTES", "shape": [1, 1]}
    made = {
        "json_base64_image": _json(
            {"inputs": [{**image, "data": [[b64]], "parameters": {"content_type": "base64"}}]}
        ),
        "json_top3_binary_output": _json(
            {
                "id": "r1",
                "parameters": {"timeout": 5_000_000},
                "inputs": [{**image, "data": [b64], "parameters": {"content_type": "base64"}}],
                "outputs": [
                    {"name": "PROBABILITIES", "parameters": {"classification": 3}},
                    {"name": "PROBABILITIES", "parameters": {"binary_data": True}},
                ],
            }
        ),
        "json_numbers": _json(
            {
                "inputs": [
                    {"name": "X", "datatype": "FP32", "shape": [2], "data": [[2.5], [1e30]]},
                    {"name": "Y", "datatype": "INT8", "shape": [3], "data": [-128, 0, 127]},
                    {"name": "B", "datatype": "BOOL", "shape": [2], "data": [True, False]},
                    {"name": "S", "datatype": "BYTES", "shape": [2], "data": ["a", "\u00e9"]},
                ],
                "parameters": {"binary_data_output": True},
            }
        ),
    }
    items = kserve.join_bytes([jpeg, png])
    head = _json(
        {
            "inputs": [
                {"name": "IMAGE", "datatype": "BYTES", "shape": [2],
                 "parameters": {"binary_data_size": len(items)}},
                {"name": "U", "datatype": "UINT16", "shape": [2],
                 "parameters": {"binary_data_size": 4}},
            ],
            "outputs": [{"name": "PROBABILITIES", "parameters": {"binary_data": True}}],
        }
    )  # fmt: skip
    made["binary_two_images"] = b"%d\n" % len(head) + head + items + b"\x01\x00\xff\xff"
    return made
