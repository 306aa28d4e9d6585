import struct
import tracemalloc

import grpc
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from inferline import kserve
from inferline.errors import InferError


@given(st.lists(st.binary(max_size=64), max_size=20))
def test_bytes_round_trip(items: list[bytes]) -> None:
    assert kserve.split_bytes(kserve.join_bytes(items)) == items


@pytest.mark.parametrize("buffer", [b"\x05\x00\x00\x00abc", b"\x01\x00"])
def test_malformed_bytes_is_invalid_argument(buffer: bytes) -> None:
    with pytest.raises(InferError) as caught:
        kserve.split_bytes(buffer)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT


def _request(
    name: str, datatype: str, shape: list[int], raw: bytes
) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="m")
    request.inputs.add(name=name, datatype=datatype, shape=shape)
    request.raw_input_contents.append(raw)
    return request


def test_raw_and_typed_contents_give_the_same_array() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    raw = _request("X", "FP32", [2, 3], array.tobytes())
    typed = service_pb2.ModelInferRequest(model_name="m")
    typed.inputs.add(name="X", datatype="FP32", shape=[2, 3]).contents.fp32_contents.extend(
        array.ravel().tolist()
    )
    np.testing.assert_array_equal(kserve.input_array(raw, 0), array)
    np.testing.assert_array_equal(kserve.input_array(typed, 0), array)


def test_find_input_explains_what_is_expected() -> None:
    request = _request("PIXELS", "UINT8", [1], b"\x00")
    with pytest.raises(InferError) as caught:
        kserve.find_input(request, "IMAGE", "BYTES", "encoded images")
    assert "expects input 'IMAGE' (encoded images); got 'PIXELS'" in caught.value.message
    with pytest.raises(InferError) as caught:
        kserve.find_input(request, "PIXELS", "BYTES", "encoded images")
    assert "must be BYTES (encoded images); got UINT8" in caught.value.message


def test_size_mismatch_is_refused() -> None:
    with pytest.raises(InferError, match="do not match shape"):
        kserve.input_array(_request("X", "FP32", [2], b"\x00" * 4), 0)


def test_outputs_round_trip() -> None:
    response = service_pb2.ModelInferResponse()
    probs = np.random.default_rng(0).random((2, 5), dtype=np.float32)
    kserve.add_output(response, "P", probs)
    kserve.add_output(response, "S", np.array([[b"a", b"bc"]], dtype=np.object_))
    np.testing.assert_array_equal(kserve.output_array(response, "P"), probs)
    assert kserve.output_array(response, "S").tolist() == [[b"a", b"bc"]]


def test_classify_matches_triton_format() -> None:
    probs = np.array([[0.1, 0.7, 0.2], [0.5, 0.25, 0.25]], dtype=np.float32)
    top = kserve.classify(probs, 2, ["a", "b", "c"])
    assert top.shape == (2, 2)
    assert top[0].tolist() == [b"0.700000:1:b", b"0.200000:2:c"]
    assert top[1, 0] == b"0.500000:0:a"


def test_class_count_parameter() -> None:
    output = service_pb2.ModelInferRequest.InferRequestedOutputTensor(name="P")
    assert kserve.class_count(output) == 0
    output.parameters["classification"].int64_param = 3
    assert kserve.class_count(output) == 3
    output.parameters["classification"].string_param = "3"
    with pytest.raises(InferError):
        kserve.class_count(output)


@pytest.mark.parametrize(
    ("datatype", "shape"),
    [
        ("UINT8", [2**32, 2**32]),
        ("BYTES", [2**32, 2**32]),
        ("UINT8", [2**62, 2**62, 0]),
        ("FP64", [0, 2**62]),
    ],
)
def test_a_shape_past_int64_is_refused_not_wrapped(datatype: str, shape: list[int]) -> None:
    # Found by fuzzing (fuzz/regressions/kserve-tensors/): np.prod counted 2^32 x 2^32 in int64
    # as 0 elements, which empty contents matched, and the reshape raised ValueError; an empty
    # [0, 2^62] FP64 tensor is 2^65 bytes to numpy, which refuses to make it.
    with pytest.raises(InferError, match="larger than any tensor"):
        kserve.input_array(_request("X", datatype, shape, b""), 0)


def test_an_empty_tensor_may_have_a_large_dimension() -> None:
    empty = kserve.input_array(_request("X", "FP64", [2**59, 0], b""), 0)
    assert empty.shape == (2**59, 0)


@pytest.mark.parametrize(
    ("datatype", "field", "values"),
    [("INT8", "int_contents", [1, 4352]), ("INT16", "int_contents", [-40000]),
     ("UINT8", "uint_contents", [256]), ("UINT16", "uint_contents", [0, 70000])],
)  # fmt: skip
def test_typed_contents_that_would_wrap_are_refused(
    datatype: str, field: str, values: list[int]
) -> None:
    # Found by fuzzing (fuzz/regressions/kserve-wire/): int_contents 4352 became the INT8 0
    # (numpy's conversion wraps, with a DeprecationWarning: numpy 2 raises OverflowError).
    request = service_pb2.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="X", datatype=datatype, shape=[len(values)])
    getattr(tensor.contents, field).extend(values)
    with pytest.raises(InferError, match=rf"{field} holds -?\d+, outside {datatype}"):
        kserve.input_array(request, 0)
    getattr(tensor.contents, field)[:] = [0] * len(values)
    assert kserve.input_array(request, 0).tolist() == [0] * len(values)


def test_a_length_prefix_claiming_4_gib_allocates_nothing() -> None:
    buffer = struct.pack("<I", 3) + b"abc" + struct.pack("<I", 2**32 - 1) + b"x" * 16
    tracemalloc.start()
    try:
        with pytest.raises(InferError, match="element 1 claims 4294967295 bytes, 16 remain"):
            kserve.split_bytes(buffer)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_a_shape_claiming_exabytes_is_refused_before_any_allocation() -> None:
    request = _request("X", "FP32", [2**20, 2**20, 2**19], b"\0" * 16)  # 2 EiB
    tracemalloc.start()
    try:
        with pytest.raises(InferError, match="16 bytes do not match shape"):
            kserve.input_array(request, 0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.booleans()
        | st.integers(-(2**63), 2**63 - 1)
        | st.floats(allow_nan=False)
        | st.text(max_size=8),
        max_size=6,
    )
)
def test_parameters_set_are_read_back_each_in_its_kind(
    values: dict[str, bool | int | float | str],
) -> None:
    request = service_pb2.ModelInferRequest()
    kserve.set_parameters(request.parameters, values)
    read = kserve.parameters(request)
    assert read == values
    assert {k: type(v) for k, v in read.items()} == {k: type(v) for k, v in values.items()}
