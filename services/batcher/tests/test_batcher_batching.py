"""Property tests of the pure core: keys, merge along dim 0 and split, over random tensors."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from batcher.batching import (
    SplitError,
    merge,
    plan,
    raw_contents,
    raw_input_views,
    split,
)
from inferline.tensors import ITEM_BYTES, join_bytes

DATATYPES = [*sorted(ITEM_BYTES), "BYTES"]
TYPED = {  # datatypes a request may also send as typed contents, with the field
    "BOOL": "bool_contents",
    "UINT8": "uint_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def tensor_data(draw: Any, datatype: str, shape: list[int], typed: bool) -> tuple[Any, bytes]:
    """Random contents for a tensor: (typed values or None, raw bytes)."""
    count = int(np.prod(shape))
    if datatype == "BYTES":
        items = draw(st.lists(st.binary(max_size=6), min_size=count, max_size=count))
        return (items if typed else None), join_bytes(items)
    if typed:
        dtype: dict[str, type[np.generic]] = {"BOOL": np.bool_, "UINT8": np.uint8}
        dtype |= {"INT32": np.int32, "INT64": np.int64, "FP32": np.float32, "FP64": np.float64}
        seed = draw(st.integers(0, 2**31))
        rng = np.random.default_rng(seed)
        values = (
            rng.integers(0, 200, size=count) if datatype != "BOOL" else rng.integers(0, 2, count)
        )
        array = values.astype(dtype[datatype])
        return array.tolist(), array.tobytes()
    raw = draw(
        st.binary(min_size=count * ITEM_BYTES[datatype], max_size=count * ITEM_BYTES[datatype])
    )
    return None, raw


@st.composite
def batchable(draw: Any, max_requests: int = 6) -> list[service_pb2.ModelInferRequest]:
    """Requests that share one key: same inputs (name, datatype, item shape), outputs, params."""
    names = draw(
        st.lists(st.sampled_from(["A", "B", "C", "IMAGE"]), min_size=1, max_size=3, unique=True)
    )
    specs = [
        (
            name,
            draw(st.sampled_from(DATATYPES)),
            draw(st.lists(st.integers(0, 3), max_size=3)),
        )
        for name in names
    ]
    outputs = draw(st.lists(st.sampled_from(["X", "Y"]), max_size=2, unique=True))
    priority = draw(st.sampled_from([None, 1, 2]))
    requests = []
    for index in range(draw(st.integers(1, max_requests))):
        items = draw(st.integers(1, 4))
        typed = draw(st.booleans()) and all(dt in TYPED for _, dt, _ in specs)
        request = service_pb2.ModelInferRequest(model_name="m", id=f"req-{index}")
        if priority is not None:
            request.parameters["priority"].int64_param = priority
        for out in outputs:
            request.outputs.add(name=out)
        order = list(specs)
        random.Random(index).shuffle(order)  # input order does not matter
        for name, datatype, item_shape in order:
            shape = [items, *item_shape]
            values, raw = tensor_data(draw, datatype, shape, typed)
            tensor = request.inputs.add(name=name, datatype=datatype, shape=shape)
            if typed:
                getattr(tensor.contents, TYPED[datatype]).extend(values)
            else:
                request.raw_input_contents.append(raw)
        requests.append(request)
    return requests


def echo(merged: service_pb2.ModelInferRequest) -> service_pb2.ModelInferResponse:
    """What an identity model answers: every input back as an output of the same name."""
    response = service_pb2.ModelInferResponse(model_name=merged.model_name, id=merged.id)
    response.parameters["batched"].bool_param = True
    for index, tensor in enumerate(merged.inputs):
        out = response.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        out.parameters["p"].string_param = "kept"
        response.raw_output_contents.append(raw_contents(merged, index))
    return response


def own_raw(request: service_pb2.ModelInferRequest) -> dict[str, tuple[str, list[int], bytes]]:
    return {
        t.name: (t.datatype, list(t.shape), raw_contents(request, i))
        for i, t in enumerate(request.inputs)
    }


@settings(max_examples=150, deadline=None)
@given(requests=batchable(), seed=st.integers(0, 1000))
def test_merge_then_split_gives_each_caller_its_own_slice(
    requests: list[service_pb2.ModelInferRequest], seed: int
) -> None:
    random.Random(seed).shuffle(requests)  # any arrival order
    plans = [plan(r, max_batch_size=64) for r in requests]
    assert all(p.key is not None for p in plans), [p.reason for p in plans]
    assert len({p.key for p in plans}) == 1
    sizes = [p.items for p in plans]
    assert sizes == [r.inputs[0].shape[0] for r in requests]

    merged = service_pb2.ModelInferRequest.FromString(merge(requests))
    as_arrived = merge(requests, [r.SerializeToString() for r in requests])  # views of the raw
    assert service_pb2.ModelInferRequest.FromString(as_arrived) == merged
    assert merged.model_name == "m"
    assert list(merged.outputs) == list(requests[0].outputs)
    assert merged.parameters == requests[0].parameters
    assert all(t.shape[0] == sum(sizes) for t in merged.inputs)
    assert len(merged.raw_input_contents) == len(merged.inputs)
    assert plan(merged, max_batch_size=64).key is not None  # a well-formed request itself

    parts = split(echo(merged), sizes, [r.id for r in requests])
    assert [p.id for p in parts] == [r.id for r in requests]
    for request, part in zip(requests, parts, strict=True):
        got = {
            t.name: (t.datatype, list(t.shape), part.raw_output_contents[i])
            for i, t in enumerate(part.outputs)
        }
        assert got == own_raw(request)
        assert part.parameters["batched"].bool_param
        assert all(o.parameters["p"].string_param == "kept" for o in part.outputs)


SAME_SIZE = {
    "BOOL": "UINT8", "UINT8": "INT8", "INT8": "UINT8", "UINT16": "INT16", "INT16": "FP16",
    "FP16": "BF16", "BF16": "UINT16", "UINT32": "INT32", "INT32": "FP32", "FP32": "UINT32",
    "UINT64": "INT64", "INT64": "FP64", "FP64": "UINT64",
}  # fmt: skip
CHANGES = ["item_shape", "datatype", "outputs", "parameters", "output_parameters", "model"]


@settings(max_examples=80, deadline=None)
@given(requests=batchable(max_requests=1), change=st.sampled_from(CHANGES))
def test_requests_that_differ_are_never_merged(
    requests: list[service_pb2.ModelInferRequest], change: str
) -> None:
    first = requests[0]
    other = service_pb2.ModelInferRequest()
    other.CopyFrom(first)
    tensor = other.inputs[0]
    if change == "item_shape":
        tensor.shape.append(1)  # the same data with one more (unit) dimension
    elif change == "datatype":
        assume(tensor.datatype in SAME_SIZE and len(other.raw_input_contents) > 0)
        tensor.datatype = SAME_SIZE[tensor.datatype]  # the same bytes, read differently
    elif change == "outputs":
        other.outputs.add(name="EXTRA")
    elif change == "parameters":
        other.parameters["timeout"].int64_param = 5
    elif change == "output_parameters":
        output = other.outputs[0] if other.outputs else other.outputs.add(name="X")
        output.parameters["classification"].int64_param = 3
    else:
        other.model_name = "other"
    a, b = plan(first, 64), plan(other, 64)
    assert a.key is not None, a.reason
    assert b.key is not None, b.reason
    assert a.key != b.key


def request_with(shape: list[int], datatype: str = "UINT8", raw: bytes | None = None) -> Any:
    request = service_pb2.ModelInferRequest(model_name="m")
    request.inputs.add(name="A", datatype=datatype, shape=shape)
    size = int(np.prod(shape)) * ITEM_BYTES.get(datatype, 1)
    request.raw_input_contents.append(b"\0" * size if raw is None else raw)
    return request


def test_unbatchable_requests_travel_alone() -> None:
    assert plan(request_with([2, 3]), 4).key is not None
    assert plan(request_with([2, 3]), 0).key is None  # the model does not batch
    assert plan(request_with([5, 3]), 4).key is None  # more than a batch
    assert plan(request_with([]), 4).key is None  # no batch dimension
    assert plan(request_with([0, 3]), 4).key is None  # an empty batch
    assert plan(request_with([2, 3], raw=b"\0" * 5), 4).key is None  # wrong size
    assert plan(request_with([2, 3], "BYTES", raw=b"\x09\0\0\0ab"), 4).key is None
    assert plan(request_with([2, 3], "NOPE"), 4).key is None
    assert plan(service_pb2.ModelInferRequest(model_name="m"), 4).key is None

    sequence = request_with([1, 3])
    sequence.parameters["sequence_id"].int64_param = 7
    assert plan(sequence, 4).key is None

    shm = request_with([1, 3])
    shm.inputs[0].parameters["shared_memory_region"].string_param = "r"
    assert plan(shm, 4).key is None
    shm_out = request_with([1, 3])
    shm_out.outputs.add(name="Y").parameters["shared_memory_region"].string_param = "r"
    assert plan(shm_out, 4).key is None

    ragged = request_with([2, 3])
    ragged.inputs.add(name="B", datatype="UINT8", shape=[3, 3])
    ragged.raw_input_contents.append(b"\0" * 9)
    assert plan(ragged, 4).key is None

    twice = request_with([1, 3])
    twice.inputs.add(name="A", datatype="UINT8", shape=[1, 3])
    twice.raw_input_contents.append(b"\0" * 3)
    assert plan(twice, 4).key is None

    missing_raw = request_with([1, 3])
    missing_raw.inputs.add(name="B", datatype="UINT8", shape=[1, 3])
    assert plan(missing_raw, 4).key is None

    # Found by fuzzing (fuzz/regressions/kserve-wire/): merging converted these to raw bytes,
    # wrapping 300 to the INT8 44 (numpy warns; numpy 2 raises OverflowError).
    typed = service_pb2.ModelInferRequest(model_name="m")
    typed.inputs.add(name="A", datatype="INT8", shape=[2, 1]).contents.int_contents.extend([1, 2])
    assert plan(typed, 4).key is not None
    typed.inputs[0].contents.int_contents[1] = 300
    assert plan(typed, 4).key is None


def test_bytes_elements_split_at_item_boundaries() -> None:
    requests = []
    for index, items in enumerate([[b"a", b"bb"], [b""], [b"ccc", b"", b"d"]]):
        request = service_pb2.ModelInferRequest(model_name="m", id=str(index))
        request.inputs.add(name="S", datatype="BYTES", shape=[len(items)])
        request.raw_input_contents.append(join_bytes(items))
        requests.append(request)
    merged = service_pb2.ModelInferRequest.FromString(
        merge(requests, [r.SerializeToString() for r in requests])
    )
    assert merged.raw_input_contents[0] == join_bytes([b"a", b"bb", b"", b"ccc", b"", b"d"])
    parts = split(echo(merged), [2, 1, 3], ["0", "1", "2"])
    assert [p.raw_output_contents[0] for p in parts] == [r.raw_input_contents[0] for r in requests]


def response_with(shape: list[int], datatype: str, raw: bytes) -> Any:
    response = service_pb2.ModelInferResponse(model_name="m")
    response.outputs.add(name="Y", datatype=datatype, shape=shape)
    response.raw_output_contents.append(raw)
    return response


@pytest.mark.parametrize(
    ("response", "match"),
    [
        (response_with([3, 2], "FP32", b"\0" * 24), "a batch of 4 items"),
        (response_with([4, 2], "FP32", b"\0" * 24), "do not match shape"),
        (response_with([], "FP32", b""), "a batch of 4 items"),
        (response_with([4], "BYTES", b"\x05\0\0\0ab"), "malformed BYTES"),
        (response_with([4], "NOPE", b""), "unknown datatype"),
    ],
)
def test_split_refuses_answers_that_do_not_fit(response: Any, match: str) -> None:
    with pytest.raises(SplitError, match=match):
        split(response, [1, 3], ["a", "b"])


def test_split_needs_raw_outputs() -> None:
    response = service_pb2.ModelInferResponse(model_name="m")
    response.outputs.add(name="Y", datatype="FP32", shape=[2]).contents.fp32_contents.extend([1, 2])
    with pytest.raises(SplitError, match="raw contents"):
        split(response, [1, 1], ["a", "b"])


@given(requests=batchable())
def test_raw_input_views_are_the_raw_contents_of_the_serialized_request(
    requests: list[service_pb2.ModelInferRequest],
) -> None:
    for request in requests:
        views = raw_input_views(request.SerializeToString())
        assert [bytes(v) for v in views] == list(request.raw_input_contents)


def test_a_truncated_request_is_not_read_past_its_end() -> None:
    request = service_pb2.ModelInferRequest(model_name="m")
    request.raw_input_contents.append(b"x" * 100)
    with pytest.raises(ValueError, match="past the end"):
        raw_input_views(request.SerializeToString()[:-10])
