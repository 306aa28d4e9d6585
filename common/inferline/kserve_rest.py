"""KServe v2 HTTP/REST bodies <-> the gRPC protocol's messages. Pure: no sockets, no aiohttp.

A REST request becomes the same ``ModelInferRequest`` a gRPC client would have sent, so one core
answers both transports; its response goes back as JSON, with the binary tensor data extension
where asked. What is supported, as Triton's HTTP endpoint does it:

- inputs as JSON ``data`` (nested lists are flattened, row-major) or binary
  (``"parameters": {"binary_data_size": n}`` and ``Inference-Header-Content-Length``); BYTES
  elements in JSON are UTF-8 strings, or base64 with ``"parameters": {"content_type":
  "base64"}`` (the convention of Seldon's MLServer), so a JPEG fits in a JSON body;
- outputs as JSON, or binary per output (``"binary_data": true``) or for all of them (request
  parameter ``binary_data_output``); the classification extension (``"classification": k``);
- request parameters, including Triton's ``timeout`` (microseconds) as the request's deadline.

Every refusal is an :class:`~inferline.errors.InferError`, INVALID_ARGUMENT unless said.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2, service_pb2

from inferline import kserve, tensors
from inferline.errors import InferError, invalid

HEADER_LENGTH = "Inference-Header-Content-Length"
JSON_TYPE = "application/json"
BINARY_TYPE = "application/octet-stream"
BASE64 = "base64"

# HTTP statuses of gRPC codes: Triton's for the codes Triton has (INTERNAL 500, NOT_FOUND 404,
# UNAVAILABLE 503, UNIMPLEMENTED 501, every other 400); for the two it has not, the standard
# mapping (google.rpc.Code): RESOURCE_EXHAUSTED 429 (back off and retry), DEADLINE_EXCEEDED 504.
HTTP_STATUS = {
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}


def http_status(code: grpc.StatusCode) -> int:
    """The HTTP status that answers a request failing with gRPC ``code``."""
    return HTTP_STATUS.get(code, 400)


def error_body(message: str) -> bytes:
    """KServe's error body: ``{"error": "..."}``."""
    return json.dumps({"error": message}).encode()


@dataclass(frozen=True)
class InferRequest:
    """A REST inference request as the gRPC message, and how its outputs want to travel."""

    message: service_pb2.ModelInferRequest
    binary_outputs: frozenset[str] = field(default_factory=frozenset)
    all_binary: bool = False  # request parameter binary_data_output
    timeout_s: float | None = None  # request parameter timeout (µs), as a deadline

    def binary(self, output: str) -> bool:
        return self.all_binary or output in self.binary_outputs


def parse_infer(
    body: bytes, header_length: str | None, model: str, version: str = ""
) -> InferRequest:
    """A ``POST /v2/models/{model}[/versions/{version}]/infer`` body as a ``ModelInferRequest``."""
    head, binary = _split(body, header_length)
    document = _json_object(head, "the request")
    try:
        return _infer_request(document, binary, model, version)
    except UnicodeEncodeError:  # a protobuf string, or a BYTES element, is UTF-8
        raise invalid(
            "the request holds a string that is not Unicode text: a lone surrogate escape "
            "(\\ud800 to \\udfff) that is not half of a pair"
        ) from None


def _infer_request(
    document: dict[str, Any], binary: bytes, model: str, version: str
) -> InferRequest:
    request = service_pb2.ModelInferRequest(model_name=model, model_version=version)
    request.id = _text(document.get("id", ""), "id")
    parameters = _object(document.get("parameters", {}), "parameters")
    all_binary = _flag(parameters.pop("binary_data_output", False), "binary_data_output")
    timeout_s = _timeout(parameters.pop("timeout", None))
    _set_parameters(request.parameters, parameters, "request parameter")
    inputs = document.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise invalid('the request needs "inputs": a list of tensors (name, shape, datatype, data)')
    offset = 0
    for index, tensor in enumerate(inputs):
        offset = _add_input(request, _object(tensor, f"inputs[{index}]"), index, binary, offset)
    if offset != len(binary):
        raise invalid(
            f"{len(binary) - offset} bytes of binary data after the JSON header belong to no "
            "input (binary_data_size of the inputs adds up to "
            f"{offset}, {len(binary)} were sent)"
        )
    binary_outputs = set()
    for index, output in enumerate(_list(document.get("outputs", []), "outputs")):
        name, binary_data = _add_output(request, _object(output, f"outputs[{index}]"), index)
        if binary_data:
            binary_outputs.add(name)
    return InferRequest(request, frozenset(binary_outputs), all_binary, timeout_s)


def _split(body: bytes, header_length: str | None) -> tuple[bytes, bytes]:
    if header_length is None:
        return body, b""
    try:
        length = int(header_length)
    except ValueError:
        length = -1
    if not 0 <= length <= len(body):
        raise invalid(
            f"{HEADER_LENGTH} is {header_length!r}: it must be the JSON header's length in bytes, "
            f"at most the body's {len(body)}"
        )
    return body[:length], body[length:]


def _json_object(text: bytes, what: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and bad UTF-8 are ValueErrors
        raise invalid(f"{what} is not valid JSON: {exc}") from None
    return _object(document, what)


def _object(value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise invalid(f"{what} must be a JSON object, not {kserve.kind(value)}")
    return dict(value)


def _list(value: object, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise invalid(f"{what} must be a JSON list, not {kserve.kind(value)}")
    return value


def _text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise invalid(f"{what} must be a string, not {kserve.kind(value)}")
    return value


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise invalid(f"{what} must be true or false, not {kserve.kind(value)}")
    return value


def _timeout(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= tensors.INT64_MAX:
        raise invalid(
            f"parameter 'timeout' is in microseconds, a positive integer (64-bit); got {value!r}"
        )
    return value / 1e6


def _set_parameters(
    target: Any, parameters: Mapping[str, object], what: str, skip: Sequence[str] = ()
) -> None:
    """JSON parameters into a protobuf ``map<string, InferParameter>``."""
    kserve.set_parameters(target, {k: v for k, v in parameters.items() if k not in skip}, what)


def _add_input(
    request: service_pb2.ModelInferRequest,
    tensor: dict[str, Any],
    index: int,
    binary: bytes,
    offset: int,
) -> int:
    """Append input ``index`` (its data always as raw contents); returns the new binary offset."""
    name = _text(tensor.get("name"), f"inputs[{index}].name")
    what = f"input {name!r}"
    datatype = _text(tensor.get("datatype"), f"{what}: datatype")
    shape = _list(tensor.get("shape"), f"{what}: shape")
    if not all(isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= tensors.INT64_MAX
               for d in shape):  # fmt: skip
        raise invalid(
            f"{what}: shape must be a list of non-negative integers (64-bit), got {shape}"
        )
    parameters = _object(tensor.get("parameters", {}), f"{what}: parameters")
    if "shared_memory_region" in parameters:
        raise InferError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"{what}: shared memory is not supported here; send the data in the request",
        )
    size = parameters.get("binary_data_size")
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise invalid(f"{what}: binary_data_size must be a non-negative integer, got {size!r}")
        if "data" in tensor:
            raise invalid(f"{what} has both binary_data_size and JSON data: send one")
        if offset + size > len(binary):
            raise invalid(
                f"{what}: binary_data_size {size} runs past the body ({len(binary) - offset} "
                "bytes of binary data left)"
            )
        raw = binary[offset : offset + size]
        offset += size
    else:
        if "data" not in tensor:
            raise invalid(f'{what} has no data: give JSON "data" or a binary_data_size')
        raw = _raw(tensor["data"], datatype, shape, parameters.get("content_type"), what)
    request.inputs.add(name=name, datatype=datatype, shape=shape)
    _set_parameters(
        request.inputs[-1].parameters, parameters, f"{what}: parameter",
        skip=("binary_data_size", "content_type"),
    )  # fmt: skip
    request.raw_input_contents.append(raw)
    return offset


def _flatten(data: object) -> Iterator[object]:
    if isinstance(data, list):
        for item in data:
            yield from _flatten(item)
    else:
        yield data


def _raw(data: object, datatype: str, shape: list[int], content_type: object, what: str) -> bytes:
    """JSON ``data`` as the raw contents a gRPC client would send (BYTES length-prefixed)."""
    try:
        values = list(_flatten(data))
    except RecursionError:
        raise invalid(f"{what}: data is nested too deeply") from None
    expected = math.prod(shape)
    if len(values) != expected:
        raise invalid(f"{what}: {len(values)} data elements do not match shape {shape}")
    if datatype == "BYTES":
        if content_type not in (None, BASE64):
            raise invalid(f"{what}: content_type is {BASE64!r} or absent, not {content_type!r}")
        return kserve.join_bytes(_element(v, content_type == BASE64, what) for v in values)
    dtype = kserve.np_dtype(datatype)
    numbers = all(isinstance(v, int | float) for v in values)
    if not numbers or (dtype == np.bool_) != all(isinstance(v, bool) for v in values):
        kind = "true or false" if dtype == np.bool_ else "numbers"
        raise invalid(f"{what}: data of a {datatype} tensor must be {kind}")
    try:
        return _fitted(np.asarray(values), dtype).tobytes()
    except (OverflowError, ValueError) as exc:
        raise invalid(f"{what}: data do not fit {datatype}: {exc}") from None


def _fitted(array: npt.NDArray[Any], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """``array`` as ``dtype``, refusing what would wrap, round or overflow (ValueError)."""
    if dtype.kind in "iu" and array.size:
        info = np.iinfo(dtype)
        if array.dtype.kind == "f" and not np.all(np.floor(array) == array):
            raise ValueError("integers expected")
        if tensors.outside(array.ravel(), dtype) is not None:
            raise ValueError(f"values outside [{info.min}, {info.max}]")
    with np.errstate(over="ignore"):
        converted = array.astype(dtype)
    if dtype.kind == "f" and np.any(np.isinf(converted) & np.isfinite(array.astype(float))):
        raise ValueError("values too large")
    return converted


def _element(value: object, b64: bool, what: str) -> bytes:
    if not isinstance(value, str):
        raise invalid(
            f"{what}: each element of a BYTES tensor is a string, not {kserve.kind(value)}"
        )
    if not b64:
        return value.encode()
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise invalid(f"{what}: an element is not valid base64 (content_type {BASE64!r})") from None


def _add_output(
    request: service_pb2.ModelInferRequest, output: dict[str, Any], index: int
) -> tuple[str, bool]:
    """Append requested output ``index``: its name, and whether it wants binary data."""
    name = _text(output.get("name"), f"outputs[{index}].name")
    parameters = _object(output.get("parameters", {}), f"output {name!r}: parameters")
    binary = _flag(parameters.pop("binary_data", False), f"output {name!r}: binary_data")
    if "shared_memory_region" in parameters:
        raise InferError(
            grpc.StatusCode.UNIMPLEMENTED,
            f"output {name!r}: shared memory is not supported here; ask for the data itself",
        )
    requested = request.outputs.add(name=name)
    _set_parameters(requested.parameters, parameters, f"output {name!r}: parameter")
    return name, binary


# -- responses --------------------------------------------------------------------------------


def infer_response(
    response: service_pb2.ModelInferResponse, request: InferRequest
) -> tuple[bytes, int | None]:
    """The response body, and the JSON header's length when binary data follows it."""
    outputs, chunks = [], []
    for index, tensor in enumerate(response.outputs):
        raw = response.raw_output_contents[index]
        item: dict[str, Any] = {
            "name": tensor.name, "datatype": tensor.datatype, "shape": list(tensor.shape),
        }  # fmt: skip
        if request.binary(tensor.name):
            item["parameters"] = {"binary_data_size": len(raw)}
            chunks.append(raw)
        else:
            item["data"] = _json_data(raw, tensor)
        outputs.append(item)
    document: dict[str, Any] = {
        "model_name": response.model_name, "model_version": response.model_version,
    }  # fmt: skip
    if response.id:
        document["id"] = response.id
    parameters = kserve.parameters(response)
    if parameters:
        document["parameters"] = parameters
    document["outputs"] = outputs
    head = json.dumps(document, separators=(",", ":")).encode()
    if not chunks:
        return head, None
    return b"".join([head, *chunks]), len(head)


def _json_data(raw: bytes, tensor: service_pb2.ModelInferResponse.InferOutputTensor) -> list[Any]:
    if tensor.datatype == "BYTES":
        return [item.decode(errors="replace") for item in kserve.split_bytes(raw)]
    values: list[Any] = np.frombuffer(raw, dtype=kserve.np_dtype(tensor.datatype)).tolist()
    return values


def metadata(response: service_pb2.ModelMetadataResponse) -> dict[str, Any]:
    """``GET /v2/models/{m}``: the same fields as ``ModelMetadata``, shapes as numbers."""

    def tensors(items: Sequence[Any]) -> list[dict[str, Any]]:
        return [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in items]

    return {
        "name": response.name,
        "versions": list(response.versions),
        "platform": response.platform,
        "inputs": tensors(response.inputs),
        "outputs": tensors(response.outputs),
    }


def model_config(config: model_config_pb2.ModelConfig) -> dict[str, Any]:
    """``GET /v2/models/{m}/config``: the configuration as Triton's JSON (proto field names,
    enum names, ``dims`` as numbers)."""
    document = json_format.MessageToDict(config, preserving_proto_field_name=True)
    numbered: dict[str, Any] = _numbers(document)
    return numbered


def _numbers(node: Any) -> Any:
    """protobuf's JSON writes int64 as strings; Triton writes dims (and shapes) as numbers."""
    if isinstance(node, dict):
        return {k: [int(d) for d in v] if k in ("dims", "shape") else _numbers(v)
                for k, v in node.items()}  # fmt: skip
    if isinstance(node, list):
        return [_numbers(v) for v in node]
    return node


def server_metadata(response: service_pb2.ServerMetadataResponse) -> dict[str, Any]:
    return {
        "name": response.name, "version": response.version,
        "extensions": list(response.extensions),
    }  # fmt: skip


def repository_index(response: service_pb2.RepositoryIndexResponse) -> list[dict[str, str]]:
    return [{"name": m.name, "version": m.version, "state": m.state} for m in response.models]
