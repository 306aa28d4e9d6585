"""The sequence protocol of a video in chunks: what tritonclient sends is accepted, every way of
breaking it is INVALID_ARGUMENT saying what to send instead."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TypeAlias

import grpc
import pytest
from tritonclient.grpc import service_pb2

from inferline import sequence
from inferline.errors import InferError
from inferline.sequence import Chunk, IncompleteSequence

Request: TypeAlias = service_pb2.ModelInferRequest


def chunk(
    data: bytes,
    sequence_id: int | str | None = 7,
    start: bool = False,
    end: bool = False,
    **params: int,
) -> Request:
    """A request as tritonclient builds it: the three parameters on every chunk."""
    request = Request(model_name="classifier_video")
    request.raw_input_contents.append(data)
    if sequence_id is not None:
        if isinstance(sequence_id, str):
            request.parameters["sequence_id"].string_param = sequence_id
        else:
            request.parameters["sequence_id"].int64_param = sequence_id
        request.parameters["sequence_start"].bool_param = start
        request.parameters["sequence_end"].bool_param = end
    for name, value in params.items():
        request.parameters[name].int64_param = value
    return request


def read(request: Request) -> bytes:
    return bytes(request.raw_input_contents[0])


async def stream(*requests: Request) -> AsyncIterator[Request]:
    for request in requests:
        yield request


async def upload(first: Request, *rest: Request) -> tuple[list[Chunk], list[Request]]:
    """The chunks of the video ``first`` starts, and what is left of the stream after it."""
    requests = stream(*rest)
    video = sequence.chunked(first, requests, read)
    assert video is not None
    chunks = [c async for c in video.chunks]
    return chunks, [r async for r in requests]


def refusal(caught: pytest.ExceptionInfo[InferError]) -> str:
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    return caught.value.message


async def test_chunks_come_in_order_up_to_sequence_end_and_the_stream_goes_on() -> None:
    after = chunk(b"next video", sequence_id=8, start=True, end=True)
    chunks, rest = await upload(
        chunk(b"ab", start=True), chunk(b"cd"), chunk(b"ef", end=True), after
    )
    assert chunks == [Chunk(b"ab", False), Chunk(b"cd", False), Chunk(b"ef", True)]
    assert rest == [after]  # not read: the next video on the stream


async def test_one_chunk_is_a_whole_sequence_and_string_ids_work() -> None:
    chunks, _ = await upload(chunk(b"all", sequence_id="clip-1", start=True, end=True))
    assert chunks == [Chunk(b"all", True)]


def test_a_request_without_sequence_parameters_is_a_whole_video() -> None:
    whole = chunk(b"video", sequence_id=None)
    assert sequence.flags(whole) is None
    assert sequence.chunked(whole, stream(), read) is None


def test_the_stated_length_comes_with_the_first_chunk() -> None:
    video = sequence.chunked(chunk(b"ab", start=True, video_bytes=1000), stream(), read)
    assert video is not None and video.size == 1000 and video.id == 7
    bad = chunk(b"ab", start=True)
    bad.parameters["video_bytes"].string_param = "big"
    with pytest.raises(InferError, match="'video_bytes' must be the file's length") as caught:
        sequence.chunked(bad, stream(), read)
    refusal(caught)


@pytest.mark.parametrize(
    ("requests", "words"),
    [
        ([chunk(b"ab")], "a chunk of sequence 7 with no sequence open: the first chunk"),
        (
            [chunk(b"ab", start=True), chunk(b"cd", start=True)],
            "sequence_start while sequence 7 is still open (chunk 1)",
        ),
        (
            [chunk(b"ab", start=True), chunk(b"cd", sequence_id=8)],
            "sequence_id 8 while sequence 7 is open (chunk 1)",
        ),
        (
            [chunk(b"ab", start=True), chunk(b"cd", sequence_id=None)],
            "chunk 1 of sequence 7 has no sequence parameters",
        ),
        ([chunk(b"ab", sequence_id=0, start=True)], "need a sequence_id"),
    ],
)
async def test_a_broken_protocol_is_invalid_argument_saying_what_to_send(
    requests: list[Request], words: str
) -> None:
    with pytest.raises(InferError) as caught:
        await upload(*requests)
    assert words in refusal(caught)


async def test_a_stream_that_ends_inside_a_sequence_is_incomplete() -> None:
    with pytest.raises(IncompleteSequence) as caught:
        await upload(chunk(b"ab", start=True), chunk(b"cde"))
    assert "ended inside sequence 7 after 2 chunk(s), 5 bytes" in refusal(caught)
    assert "sequence_end=true" in caught.value.message


def test_sequence_flags_must_be_bools() -> None:
    request = chunk(b"ab", start=True)
    request.parameters["sequence_end"].int64_param = 1
    with pytest.raises(InferError, match="'sequence_end' must be a bool"):
        sequence.flags(request)
