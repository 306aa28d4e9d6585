"""KServe v2 REST bodies <-> gRPC messages, without a server: what Triton's HTTP endpoint
accepts becomes exactly what a gRPC client would have sent, and back."""

from __future__ import annotations

import json
import struct

import grpc
import numpy as np
import pytest
from tritonclient.grpc import model_config_pb2, service_pb2

from inferline import kserve, kserve_rest
from inferline.errors import InferError


def parse(document: object, binary: bytes = b"") -> kserve_rest.InferRequest:
    head = json.dumps(document).encode()
    length = str(len(head)) if binary else None
    return kserve_rest.parse_infer(head + binary, length, "m", "1")


def test_json_numbers_become_the_raw_contents_a_grpc_client_sends() -> None:
    parsed = parse({
        "id": "7",
        "parameters": {"priority": 2, "tag": "x", "timeout": 250_000},
        "inputs": [{"name": "A", "datatype": "INT16", "shape": [2, 2], "data": [[1, -2], [3, 4]]},
                   {"name": "B", "datatype": "BOOL", "shape": [1], "data": [True]}],
    })  # fmt: skip
    request = parsed.message
    assert (request.model_name, request.model_version, request.id) == ("m", "1", "7")
    assert kserve.parameters(request) == {"priority": 2, "tag": "x"}
    assert parsed.timeout_s == 0.25
    np.testing.assert_array_equal(kserve.input_array(request, 0), [[1, -2], [3, 4]])
    assert kserve.input_array(request, 0).dtype == np.int16
    assert kserve.input_array(request, 1).tolist() == [True]


def test_binary_inputs_are_taken_in_order_beside_json_ones() -> None:
    raw = np.arange(3, dtype=np.float32).tobytes()
    items = kserve.join_bytes([b"\xff\xd8jpeg", b"two"])
    parsed = parse(
        {"inputs": [
            {"name": "F", "datatype": "FP32", "shape": [3], "parameters": {"binary_data_size": 12}},
            {"name": "S", "datatype": "BYTES", "shape": [1], "data": ["text"]},
            {"name": "B", "datatype": "BYTES", "shape": [2],
             "parameters": {"binary_data_size": len(items)}},
        ],
         "outputs": [{"name": "P", "parameters": {"binary_data": True, "classification": 2}},
                     {"name": "Q"}]},
        raw + items,
    )  # fmt: skip
    request = parsed.message
    assert kserve.input_array(request, 0).tolist() == [0.0, 1.0, 2.0]
    assert kserve.input_array(request, 1).tolist() == [b"text"]
    assert kserve.input_array(request, 2).tolist() == [b"\xff\xd8jpeg", b"two"]
    assert parsed.binary("P") and not parsed.binary("Q")
    assert kserve.class_count(request.outputs[0]) == 2
    assert "binary_data" not in request.outputs[0].parameters


@pytest.mark.parametrize(
    ("document", "binary", "words"),
    [
        ({"inputs": [{"name": "A", "datatype": "FP32", "shape": [2], "data": [1, "x"]}]}, b"",
         "must be numbers"),
        ({"inputs": [{"name": "A", "datatype": "UINT8", "shape": [1], "data": [300]}]}, b"",
         "do not fit UINT8"),
        ({"inputs": [{"name": "A", "datatype": "BOOL", "shape": [1], "data": [1]}]}, b"",
         "must be true or false"),
        ({"inputs": [{"name": "A", "datatype": "INT8", "shape": [1],
                      "parameters": {"binary_data_size": 4}}]}, b"ab", "runs past the body"),
        ({"inputs": [{"name": "A", "datatype": "BYTES", "shape": [1], "data": [7]}]}, b"",
         "is a string, not a number"),
        ({"inputs": [{"name": "A", "datatype": "WORD", "shape": [1], "data": [1]}]}, b"",
         "unknown datatype 'WORD'"),
        ({"inputs": [{"name": "A", "datatype": "INT8", "shape": [1]}]}, b"", "has no data"),
        ({"inputs": [{"name": "A", "datatype": "INT8", "shape": [1], "data": [1]}],
          "parameters": {"timeout": 0}}, b"", "positive integer"),
        ({"inputs": [{"name": "A", "datatype": "INT8", "shape": [1], "data": [1]}],
          "parameters": {"p": [1]}}, b"", "request parameter 'p' must be a boolean"),
        ({"inputs": [{"name": "A", "datatype": "INT8", "shape": [1], "data": [1]}],
          "outputs": [{"name": "P", "parameters": {"binary_data": "yes"}}]}, b"",
         "binary_data must be true or false"),
    ],
    ids=["mixed types", "overflow", "bool", "short binary", "bytes number", "datatype",
         "no data", "timeout", "parameter", "binary_data"],
)  # fmt: skip
def test_what_cannot_be_a_tensor_is_invalid_argument_saying_why(
    document: dict[str, object], binary: bytes, words: str
) -> None:
    with pytest.raises(InferError) as caught:
        parse(document, binary)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert words in caught.value.message


def test_deep_nesting_is_refused_not_a_crash() -> None:
    body = b'{"inputs": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(InferError) as caught:
        kserve_rest.parse_infer(body, None, "m")
    assert "not valid JSON" in caught.value.message


def test_responses_as_json_or_binary_per_output() -> None:
    response = service_pb2.ModelInferResponse(model_name="m", model_version="1", id="r")
    kserve.add_output(response, "P", np.array([[0.25, 0.75]], np.float32))
    kserve.add_output(response, "L", np.array([[b"0.75:1:dog"]], np.object_))
    response.parameters["triton_final_response"].bool_param = True
    plain = parse({"inputs": [{"name": "A", "datatype": "INT8", "shape": [1], "data": [1]}]})
    body, length = kserve_rest.infer_response(response, plain)
    assert length is None
    assert json.loads(body) == {
        "model_name": "m", "model_version": "1", "id": "r",
        "parameters": {"triton_final_response": True},
        "outputs": [{"name": "P", "datatype": "FP32", "shape": [1, 2], "data": [0.25, 0.75]},
                    {"name": "L", "datatype": "BYTES", "shape": [1, 1], "data": ["0.75:1:dog"]}],
    }  # fmt: skip
    binary = parse({"inputs": [{"name": "A", "datatype": "INT8", "shape": [1], "data": [1]}],
                    "parameters": {"binary_data_output": True}})  # fmt: skip
    body, length = kserve_rest.infer_response(response, binary)
    assert length is not None
    head = json.loads(body[:length])
    sizes = [o["parameters"]["binary_data_size"] for o in head["outputs"]]
    assert sizes == [8, 4 + len(b"0.75:1:dog")]
    assert np.frombuffer(body[length : length + 8], np.float32).tolist() == [0.25, 0.75]
    assert body[length + 8 :] == struct.pack("<I", 10) + b"0.75:1:dog"


def test_configuration_json_has_dims_as_numbers() -> None:
    config = model_config_pb2.ModelConfig(
        name="m", max_batch_size=8,
        input=[model_config_pb2.ModelInput(name="I", data_type=model_config_pb2.TYPE_STRING,
                                           dims=[1])],
    )  # fmt: skip
    document = kserve_rest.model_config(config)
    assert document["max_batch_size"] == 8
    assert document["input"] == [{"name": "I", "data_type": "TYPE_STRING", "dims": [1]}]


@pytest.mark.parametrize(
    ("code", "status"),
    [(grpc.StatusCode.INVALID_ARGUMENT, 400), (grpc.StatusCode.FAILED_PRECONDITION, 400),
     (grpc.StatusCode.NOT_FOUND, 404), (grpc.StatusCode.INTERNAL, 500),
     (grpc.StatusCode.UNIMPLEMENTED, 501), (grpc.StatusCode.UNAVAILABLE, 503),
     (grpc.StatusCode.RESOURCE_EXHAUSTED, 429), (grpc.StatusCode.DEADLINE_EXCEEDED, 504)],
)  # fmt: skip
def test_http_status_of_each_grpc_code(code: grpc.StatusCode, status: int) -> None:
    assert kserve_rest.http_status(code) == status


@pytest.mark.parametrize(
    "body",
    [
        b'{"id": "\\ud800", "inputs": [{"name": "A", "datatype": "INT8", "shape": [1], '
        b'"data": [1]}]}',
        b'{"inputs": [{"name": "A\\udfff", "datatype": "INT8", "shape": [1], "data": [1]}]}',
        b'{"inputs": [{"name": "A", "datatype": "BYTES", "shape": [1], "data": ["\\ud800"]}]}',
        b'{"inputs": [{"name": "A", "datatype": "INT8", "shape": [1], "data": [1]}], '
        b'"parameters": {"\\ud800": 1}}',
        b'{"inputs": [{"name": "A", "datatype": "BYTES", "shape": [1], "data": ["\xed\xa0\x80"]}]}',
    ],
    ids=["id", "name", "element", "parameter name", "encoded surrogate"],
)
def test_a_lone_surrogate_is_invalid_argument_not_a_crash(body: bytes) -> None:
    # Found by fuzzing (fuzz/regressions/rest/): JSON's "\ud800" is a str that protobuf cannot
    # encode as UTF-8, and its UnicodeEncodeError escaped parse_infer (HTTP 500).
    with pytest.raises(InferError) as caught:
        kserve_rest.parse_infer(body, None, "m")
    assert "lone surrogate" in caught.value.message
    pair = body.replace(b"\\ud800", b"\\ud83d\\ude00").replace(b"\\udfff", b"")
    if b"\xed" not in pair:
        kserve_rest.parse_infer(pair, None, "m")  # a pair is text: an emoji


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"inputs": [{"name": "A", "datatype": "INT8", "shape": [1], "data": [1]}], '
         b'"outputs": [{"name": "P", "parameters": {"classification": 92233720368547758086}}]}',
         "'classification' is 92233720368547758086: an integer must fit in 64 bits"),
        (b'{"inputs": [{"name": "A", "datatype": "INT8", "shape": [1], "data": [1], '
         b'"parameters": {"p": -9223372036854775809}}]}', "must fit in 64 bits"),
        (b'{"inputs": [{"name": "A", "datatype": "INT8", "shape": [18446744073709551616, 0], '
         b'"data": []}]}', "non-negative integers (64-bit)"),
        (b'{"inputs": [{"name": "A", "datatype": "INT8", "shape": [1], "data": [1]}], '
         b'"parameters": {"timeout": 1' + b"0" * 400 + b"}}", "a positive integer (64-bit)"),
    ],
    ids=["output parameter", "input parameter", "shape", "timeout"],
)  # fmt: skip
def test_an_integer_past_64_bits_is_invalid_argument_not_a_crash(body: bytes, words: str) -> None:
    # Found by fuzzing (fuzz/regressions/rest/): JSON integers are unbounded; protobuf's int64
    # fields raised ValueError (and a timeout past a float, OverflowError), answered 500.
    with pytest.raises(InferError) as caught:
        kserve_rest.parse_infer(body, None, "m")
    assert words in caught.value.message
