"""``preprocess_video`` in chunks over real gRPC (port 0): the frames come back while the upload
is still arriving, the same as for the whole file; every break of the sequence protocol is
INVALID_ARGUMENT saying what to send, and never disturbs another stream."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as triton
from tritonclient.grpc import service_pb2_grpc

from inferline_testing import chunks as chunks_
from inferline_testing import media
from inferline_testing.chunks import Request, finals
from preprocess.choice import Machine
from preprocess.config import Config

STREAM_CAP = 1024 * 1024
CONFIG = Config(
    port=0,
    host="127.0.0.1",
    backend="opencv",
    workers=2,
    max_video_stream_bytes=STREAM_CAP,
    video_chunk_frames=4,
    video_max_samples=50,
    video_fps=2.0,
)
MODEL = "preprocess_video"
CHUNK_BYTES = 4096


MACHINE = Machine(dali=False, gpus=0)  # the server conftest.py starts: OpenCV alone


@functools.cache
def video(codec: str = "vp9_webm", frames: int = 30) -> bytes:
    return media.make_video(codec, media.video_frames(frames))


def request(data: bytes, sequence_id: int | str = 7, **flags_and_parameters: Any) -> Request:
    return chunks_.request(MODEL, data, sequence_id, **flags_and_parameters)


def one(data: bytes, **parameters: Any) -> list[Request]:
    """``data`` as a sequence of one chunk."""
    return [request(data, start=True, end=True, **parameters)]


def chunks(data: bytes, size: int = CHUNK_BYTES, **parameters: Any) -> list[Request]:
    return chunks_.chunks(MODEL, data, size, **parameters)


async def send(
    client: triton.InferenceServerClient,
    requests: list[Request],
    hold_last_until_a_result: bool = False,
    keep_open: bool = False,
) -> list[triton.InferResult]:
    return await chunks_.send(client, requests, hold_last_until_a_result, keep_open)


def frames(results: list[triton.InferResult]) -> tuple[list[int], np.ndarray[Any, Any]]:
    tensors = np.concatenate([r.as_numpy("TENSOR") for r in results])
    return chunks_.frame_indices(results), tensors


async def refusal(
    client: triton.InferenceServerClient, requests: list[Request], keep_open: bool = True
) -> str:
    """The details of the INVALID_ARGUMENT that ``requests`` end with; the last of them is the
    one refused (a later write would race with the status: see :func:`chunks_.send`)."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await send(client, requests, keep_open=keep_open)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    return caught.value.details() or ""


@pytest.mark.parametrize("codec", ["vp9_webm", "mpeg4_mp4"])  # the mp4's index is at its end
async def test_a_video_in_chunks_gives_the_frames_of_the_whole_file(
    client: triton.InferenceServerClient, codec: str
) -> None:
    data = video(codec)
    whole = await send(client, [chunks_.whole(MODEL, data)])
    chunked = await send(client, chunks(data))
    assert len(chunks(data)) > 3
    assert frames(chunked)[0] == frames(whole)[0] == [0, 5, 10, 15, 20, 25]  # 2 fps
    np.testing.assert_array_equal(frames(chunked)[1], frames(whole)[1])
    assert finals(chunked)[-1] and not any(finals(chunked)[:-1])


async def test_frames_come_back_before_the_last_chunk_is_sent(
    client: triton.InferenceServerClient,
) -> None:
    data = video("vp9_webm", frames=100)  # 10 s: FFmpeg reads up to 5 s before a first frame
    results = await send(client, chunks(data, every_n=10), hold_last_until_a_result=True)
    assert frames(results)[0] == list(range(0, 100, 10))
    assert finals(results)[-1] and not any(finals(results)[:-1])


async def test_the_stated_length_lets_an_mp4_with_its_index_first_start_early(
    client: triton.InferenceServerClient,
) -> None:
    data = video("h264_faststart_mp4", frames=100)
    requests = chunks(data, video_bytes=len(data), max_frames=3)
    results = await send(client, requests, hold_last_until_a_result=True)
    assert frames(results)[0] == [0, 5, 10]


async def test_a_stream_carries_one_video_after_another(
    client: triton.InferenceServerClient,
) -> None:
    data = video()
    second = [dict(r, sequence_id="second") for r in chunks(data, every_n=15)]
    whole = chunks_.whole(MODEL, data, every_n=10)
    results = await send(client, [*chunks(data), *second, whole])
    assert finals(results).count(True) == 3
    assert frames(results)[0] == [0, 5, 10, 15, 20, 25, 0, 15, 0, 10, 20]


async def test_a_sampling_done_early_answers_at_once_and_drains_the_rest(
    client: triton.InferenceServerClient,
) -> None:
    data = video("vp9_webm", frames=100)
    results = await send(client, chunks(data, max_frames=2), hold_last_until_a_result=True)
    assert frames(results)[0] == [0, 5]
    assert finals(results)[-1] and not any(finals(results)[:-1])


@pytest.mark.parametrize(
    ("requests", "words"),
    [
        (lambda: [request(b"abc")], "a chunk of sequence 7 with no sequence open"),
        (
            lambda: [*chunks(video())[:2], request(b"x", start=True)],
            "sequence_start while sequence 7 is still open (chunk 2)",
        ),
        (
            lambda: [*chunks(video())[:2], request(b"x", sequence_id=8, end=True)],
            "sequence_id 8 while sequence 7 is open (chunk 2)",
        ),
        (lambda: one(video(), video_bytes=STREAM_CAP + 1), "(max_video_stream_bytes) is"),
        (lambda: one(video(), video_bytes=100), "the 100 bytes its first chunk said"),
        (lambda: one(b"not a video at all" * 1000), "not a recognised video"),
        (lambda: one(video(), fps=1.0, every_n=2), "exactly one of every_n and fps"),
    ],
)
async def test_a_broken_upload_is_invalid_argument_saying_what_to_send(
    client: triton.InferenceServerClient, requests: Any, words: str
) -> None:
    assert words in await refusal(client, requests())


async def test_a_stream_that_ends_mid_video_is_invalid_argument(
    client: triton.InferenceServerClient,
) -> None:
    requests = chunks(video("vp9_webm", frames=100))[:-3]  # and the client half-closes
    details = await refusal(client, requests, keep_open=False)
    assert "the stream ended inside sequence 7 after" in details


async def test_the_spool_is_capped_by_name(client: triton.InferenceServerClient) -> None:
    size = 64 * 1024
    data = media.large_video(STREAM_CAP + 4 * size, min_seconds=1.0)
    over = chunks(data, size=size)[: STREAM_CAP // size + 1]  # the last one passes the cap
    details = await refusal(client, over)
    assert f"the upload passed {STREAM_CAP} bytes; the limit (max_video_stream_bytes)" in details


async def test_a_broken_stream_leaves_the_others_alone(
    client: triton.InferenceServerClient,
) -> None:
    data = video()
    good, bad = await asyncio.gather(
        send(client, chunks(data, size=1024)),
        refusal(client, [*chunks(data)[:3], request(b"x", sequence_id=9, end=True)]),
    )
    assert frames(good)[0] == [0, 5, 10, 15, 20, 25]
    assert "sequence_id 9 while sequence 7 is open" in bad


async def test_response_headers_go_out_with_the_first_chunk(url: str) -> None:
    # A proxy in front keeps a request's body for retries until the response begins.
    sent = asyncio.Event()

    async def requests() -> AsyncIterator[Any]:
        yield chunks_.protobuf(chunks(video("vp9_webm", frames=100))[0])
        sent.set()
        await asyncio.Event().wait()  # the rest never comes; the call is cancelled

    async with grpc.aio.insecure_channel(url) as channel:
        call = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(requests())
        await asyncio.wait_for(call.initial_metadata(), 60)
        assert sent.is_set()
        call.cancel()
