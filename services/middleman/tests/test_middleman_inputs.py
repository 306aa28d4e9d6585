"""What a request sends: a batch of encoded images (BYTES [N], 1 <= N <= max_batch) or one video
(BYTES [1]); anything else is INVALID_ARGUMENT naming the input and what it must be."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st
from tritonclient.grpc import service_pb2

from inferline.errors import InferError
from middleman import inputs

from .conftest import bytes_request

MAX_BATCH = 8


def refusal(call: Callable[..., object], *args: object) -> str:
    """The INVALID_ARGUMENT message ``call(*args)`` raises."""
    with pytest.raises(InferError) as caught:
        call(*args)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT, caught.value
    return caught.value.message


@given(st.lists(st.binary(max_size=64), min_size=1, max_size=MAX_BATCH))
def test_a_batch_of_images_arrives_whole_and_in_order(items: list[bytes]) -> None:
    assert inputs.images(bytes_request(items), MAX_BATCH) == items


@given(st.lists(st.binary(max_size=64), min_size=1, max_size=MAX_BATCH))
def test_typed_bytes_contents_are_read_as_well_as_raw_ones(items: list[bytes]) -> None:
    request = service_pb2.ModelInferRequest(model_name="classifier")
    tensor = request.inputs.add(name="IMAGE", datatype="BYTES", shape=[len(items)])
    tensor.contents.bytes_contents.extend(items)
    assert inputs.images(request, MAX_BATCH) == items


@pytest.mark.parametrize("count", [0, MAX_BATCH + 1])
def test_a_batch_outside_1_to_max_batch_is_refused_naming_the_limit(count: int) -> None:
    message = refusal(inputs.images, bytes_request([b"x"] * count), MAX_BATCH)
    assert f"1 <= N <= {MAX_BATCH} (max_batch)" in message
    assert f"got [{count}]" in message


def test_a_batch_of_other_rank_is_refused_with_its_shape() -> None:
    request = bytes_request([b"a", b"b", b"c", b"d"], shape=[2, 2])
    assert "got [2, 2]" in refusal(inputs.images, request, MAX_BATCH)


def test_a_batch_shaped_as_the_config_says_n_by_1_is_accepted() -> None:
    assert inputs.images(bytes_request([b"a", b"b"], shape=[2, 1]), MAX_BATCH) == [b"a", b"b"]


def test_a_batch_of_another_shape_is_refused_naming_both_accepted_ones() -> None:
    message = refusal(inputs.images, bytes_request([b"a", b"b"], shape=[1, 2]), MAX_BATCH)
    assert f"must have shape [N, 1] or [N] with 1 <= N <= {MAX_BATCH}" in message
    assert message.endswith("got [1, 2]")


def test_the_wrong_input_name_is_refused_naming_the_expected_one() -> None:
    message = refusal(inputs.images, bytes_request([b"x"], name="INPUT"), MAX_BATCH)
    assert "expects input 'IMAGE'" in message and "got 'INPUT'" in message


def test_the_wrong_datatype_is_refused() -> None:
    request = service_pb2.ModelInferRequest(model_name="classifier")
    request.inputs.add(name="IMAGE", datatype="UINT8", shape=[3])
    request.raw_input_contents.append(b"\x00\x01\x02")
    assert "must be BYTES" in refusal(inputs.images, request, MAX_BATCH)


def test_a_cut_short_bytes_tensor_is_refused() -> None:
    request = bytes_request([b"abcdef"])
    request.raw_input_contents[0] = request.raw_input_contents[0][:-2]
    assert "malformed BYTES tensor" in refusal(inputs.images, request, MAX_BATCH)


@given(st.binary(max_size=256))
def test_one_video_arrives_as_it_was_sent(video: bytes) -> None:
    request = bytes_request([video], name="VIDEO", model="classifier_video")
    assert inputs.video(request) == video


@pytest.mark.parametrize("items", [[], [b"one", b"two"]])
def test_anything_but_one_video_is_refused_with_its_shape(items: list[bytes]) -> None:
    request = bytes_request(items, name="VIDEO", model="classifier_video")
    message = refusal(inputs.video, request)
    assert f"'VIDEO' must have shape [1]; got [{len(items)}]" in message


def test_a_video_request_without_a_video_is_refused_naming_the_input() -> None:
    request = bytes_request([b"x"], name="IMAGE", model="classifier_video")
    assert "expects input 'VIDEO'" in refusal(inputs.video, request)
