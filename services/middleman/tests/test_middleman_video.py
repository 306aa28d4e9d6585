"""``classifier_video`` in chunks on port 0, in front of fake upstreams: frames are classified and
answered while the upload still arrives (decoding in process, or forwarded to preprocess over
one stream); every break of the sequence protocol is INVALID_ARGUMENT saying what to send, and
never disturbs another stream."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import tritonclient.grpc.aio as triton
from tritonclient.grpc import service_pb2_grpc

from inferline_testing import chunks as chunks_
from inferline_testing import media
from inferline_testing.chunks import Request, finals, frame_indices

from .conftest import Fake, MakeMiddleman

MODEL = "classifier_video"
CHUNK_BYTES = 4096


@functools.cache
def video(frames: int = 30, width: int = 320, height: int = 240) -> bytes:
    """The panning cat, VP9 in webm, at 10 fps (OpenCV writes it: no ffmpeg CLI needed)."""
    return media.make_video("vp9_webm", media.video_frames(frames, width, height))


def request(data: bytes, sequence_id: int | str = 7, **flags_and_parameters: Any) -> Request:
    return chunks_.request(MODEL, data, sequence_id, **flags_and_parameters)


def chunks(data: bytes, size: int = CHUNK_BYTES, **parameters: Any) -> list[Request]:
    return chunks_.chunks(MODEL, data, size, **parameters)


@pytest.fixture
async def client(make_middleman: MakeMiddleman) -> AsyncIterator[triton.InferenceServerClient]:
    """A client of a middleman decoding in process, at most 64 KiB a message, 4 frames a chunk
    (so the first results need only the first seconds of a video)."""
    url = await make_middleman(
        preprocess_url="",
        max_message_bytes=65536,
        max_video_bytes=65535,
        max_image_bytes=65535,
        video_chunk_frames=4,
    )
    async with triton.InferenceServerClient(url) as c:
        yield c


async def refusal(
    client: triton.InferenceServerClient, requests: list[Request], keep_open: bool = True
) -> grpc.aio.AioRpcError:
    """The error ``requests`` end with; the last of them is the one refused."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await chunks_.send(client, requests, keep_open=keep_open)
    return caught.value


async def test_a_video_larger_than_a_message_is_classified_while_it_arrives(
    client: triton.InferenceServerClient, fake_triton: Fake
) -> None:
    data = video(100)  # 10 s, over four messages' worth: it cannot come whole
    assert len(data) > 4 * 65536
    requests = chunks(data, size=32 * 1024, every_n=10)
    results = await chunks_.send(client, requests, hold_last_until_a_result=True)
    frames = len(results)
    assert frame_indices(results) == list(range(0, 10 * frames, 10)) and frames > 2
    assert finals(results) == [False] * (frames - 1) + [True]
    for result in results:
        assert result.as_numpy("PROBABILITIES").shape == (1, 5)  # top 5 by default
    assert fake_triton.servicer.calls  # classified by "Triton", a chunk of frames a call


async def test_a_whole_video_and_videos_in_chunks_share_a_stream(
    client: triton.InferenceServerClient,
) -> None:
    data = video(width=160, height=120)  # whole, it must fit in one message
    second = chunks_.chunks(MODEL, data, CHUNK_BYTES, sequence_id="clip-2", every_n=15)
    whole = chunks_.whole(MODEL, data, every_n=10)
    results = await chunks_.send(client, [*chunks(data, fps=2.0), *second, whole])
    assert frame_indices(results) == [0, 5, 10, 15, 20, 25, 0, 15, 0, 10, 20]
    assert finals(results).count(True) == 3


async def test_a_video_in_chunks_is_forwarded_to_preprocess_over_one_stream(
    make_middleman: MakeMiddleman, fake_preprocess: Fake
) -> None:
    url = await make_middleman()  # decoding at the (fake) preprocess service
    data = bytes(range(256)) * 64  # the fake decodes nothing: a frame per chunk it receives
    requests = chunks(data, size=4096, every_n=3, video_bytes=len(data))
    async with triton.InferenceServerClient(url) as client:
        results = await chunks_.send(client, requests, hold_last_until_a_result=True)
    assert frame_indices(results) == [0, 1, 2, 3]  # a frame back for each chunk forwarded
    forwarded = fake_preprocess.servicer.streamed
    assert b"".join(r.raw_input_contents[0][4:] for r in forwarded) == data
    first, *rest = forwarded
    assert first.model_name == "preprocess_video"
    assert {k: _value(v) for k, v in first.parameters.items()} == {
        "sequence_id": 7, "sequence_start": True, "sequence_end": False, "every_n": 3,
        "video_bytes": len(data), "resize": 256, "crop": 224,
    }  # fmt: skip
    assert [r.parameters["sequence_end"].bool_param for r in rest] == [False, False, True]
    assert {r.parameters["sequence_id"].int64_param for r in rest} == {7}


async def test_frames_of_the_wrong_shape_from_preprocess_are_internal_naming_the_hop(
    make_middleman: MakeMiddleman, fake_preprocess: Fake
) -> None:
    url = await make_middleman()  # decoding at the (fake) preprocess service
    fake_preprocess.servicer.crop = 112  # the model needs 224
    async with triton.InferenceServerClient(url) as client:
        error = await refusal(client, chunks(bytes(4096), size=4096), keep_open=False)
        assert error.code() == grpc.StatusCode.INTERNAL, error.details()
        assert f"preprocess at {fake_preprocess.url} sent UINT8 [1, 3, 112, 112] for 1 " in (
            error.details() or ""
        )
        fake_preprocess.servicer.crop = None  # the stream failed, not the service
        results = await chunks_.send(client, chunks(bytes(4096), size=4096))
    assert frame_indices(results) == [0]


def _value(param: Any) -> Any:
    return getattr(param, param.WhichOneof("parameter_choice"))


async def test_a_sampling_done_early_answers_at_once_and_drains_the_rest(
    client: triton.InferenceServerClient,
) -> None:
    data = video(100)
    requests = chunks(data, max_frames=2, every_n=5)
    results = await chunks_.send(client, requests, hold_last_until_a_result=True)
    assert frame_indices(results) == [0, 5] and finals(results) == [False, True]


@pytest.mark.parametrize("placement", ["in-process", "remote"])
@pytest.mark.parametrize(
    ("requests", "words"),
    [
        (lambda: [request(b"abc")], "a chunk of sequence 7 with no sequence open"),
        (
            lambda: [*chunks(video(100))[:2], request(b"x", start=True)],
            "sequence_start while sequence 7 is still open (chunk 2)",
        ),
        (
            lambda: [*chunks(video(100))[:2], request(b"x", sequence_id="other", end=True)],
            "sequence_id 'other' while sequence 7 is open (chunk 2)",
        ),
        (
            lambda: [*chunks(video(100))[:2], chunks_.whole(MODEL, b"x")],
            "chunk 2 of sequence 7 has no sequence parameters",
        ),
    ],
)
async def test_a_broken_protocol_is_invalid_argument_saying_what_to_send(
    make_middleman: MakeMiddleman, placement: str, requests: Any, words: str
) -> None:
    decoding = {"preprocess_url": ""} if placement == "in-process" else {}
    url = await make_middleman(video_chunk_frames=4, **decoding)
    async with triton.InferenceServerClient(url) as client:
        error = await refusal(client, requests())
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert words in (error.details() or "")


async def test_a_bad_sampling_is_refused_at_the_first_chunk(
    client: triton.InferenceServerClient,
) -> None:
    # (decoding at preprocess, preprocess checks the sampling it is forwarded)
    error = await refusal(client, [request(b"abc", start=True, fps=1.0, every_n=2)])
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "exactly one of every_n and fps" in (error.details() or "")


async def test_a_stream_that_ends_mid_video_is_invalid_argument(
    client: triton.InferenceServerClient,
) -> None:
    error = await refusal(client, chunks(video(100))[:-4], keep_open=False)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "the stream ended inside sequence 7 after" in (error.details() or "")


async def test_each_chunk_is_held_to_the_public_message_limit(
    client: triton.InferenceServerClient,
) -> None:
    error = await refusal(client, chunks(video(100), size=70000)[:1])
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "(INFERLINE_MIDDLEMAN_MAX_MESSAGE_BYTES): send the video in smaller chunks" in (
        error.details() or ""
    )


async def test_the_spool_is_capped_by_name(make_middleman: MakeMiddleman) -> None:
    url = await make_middleman(
        preprocess_url="", max_video_stream_bytes=64 * 1024, video_chunk_frames=4
    )
    data = media.large_video(128 * 1024, min_seconds=1.0)
    async with triton.InferenceServerClient(url) as client:
        error = await refusal(client, chunks(data, size=8 * 1024)[:9])  # the 9th passes it
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "the limit (max_video_stream_bytes) is 65536" in (error.details() or "")


async def test_a_broken_stream_leaves_the_others_alone(
    client: triton.InferenceServerClient,
) -> None:
    data = video()
    broken = [*chunks(data)[:3], request(b"x", sequence_id=9, end=True)]
    good, error = await asyncio.gather(
        chunks_.send(client, chunks(data, size=1024, fps=2.0)), refusal(client, broken)
    )
    assert frame_indices(good) == [0, 5, 10, 15, 20, 25]
    assert "sequence_id 9 while sequence 7 is open" in (error.details() or "")


async def test_response_headers_go_out_with_the_first_chunk(make_middleman: MakeMiddleman) -> None:
    # A proxy in front keeps a request's body for retries until the response begins: it must
    # begin at once, not with the first frame (Envoy would keep up to 64 MiB of each upload).
    url = await make_middleman(preprocess_url="")
    first_chunk = chunks(video(100))[0]
    sent = asyncio.Event()

    async def requests() -> AsyncIterator[Any]:
        yield chunks_.protobuf(first_chunk)
        sent.set()
        await asyncio.Event().wait()  # the rest never comes; the call is cancelled

    async with grpc.aio.insecure_channel(url) as channel:
        call = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(requests())
        await asyncio.wait_for(call.initial_metadata(), chunks_.TIMEOUT_S)
        assert sent.is_set()
        call.cancel()
