"""Progressive decoding: a video decoded from an upload while its chunks are still arriving, the
same frames as from memory; an upload that fails or breaks a limit ends decoding with why."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest

from inferline.imaging.decode import DecodeError, Geometry
from inferline.imaging.streaming import read_as_decoded, read_chunks
from inferline.imaging.upload import UploadStream, spool
from inferline.imaging.video import CpuVideoReader, FrameChunk, Sampling, VideoLimits
from inferline_testing import media, tools
from inferline_testing.waits import wait_for_state

GEOMETRY = Geometry()
EVERY_5 = Sampling(every_n=5, fps=0, max_samples=100)
CHUNK_BYTES = 2048
TIMEOUT_S = 30.0


@functools.cache
def video(codec: str, frames: int = 30) -> bytes:
    """``frames`` of the panning cat at 10 fps; skips the test if this machine can't."""
    with tools.missing_on(LookupError):
        return media.make_video(codec, media.video_frames(frames))


def long_video(codec: str) -> bytes:
    """10 s: FFmpeg reads up to 5 s of a video before its first frame (analyzeduration), so a
    video whose first frames come out before its end must be longer than that."""
    return video(codec, 100)


@dataclass
class Decoded:
    frames: FrameChunk
    written_at_first: int  # bytes of the upload received when the first frames came out


async def decode_while_uploading(
    data: bytes,
    *,
    stated: bool,
    hold_back: float = 0.0,
    limits: VideoLimits | None = None,
    upload: UploadStream | None = None,
) -> Decoded:
    """Upload ``data`` in chunks while decoding it; the last ``hold_back`` of them (a fraction)
    are sent only once the first frames have come out (a timeout fails the test if they never
    do)."""
    upload = upload or UploadStream(size=len(data) if stated else None, window=16 * CHUNK_BYTES)
    pieces = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)]
    first_frames = asyncio.Event()
    held = len(pieces) - int(len(pieces) * hold_back) if hold_back else -1

    async def chunks() -> AsyncIterator[bytes]:
        for index, piece in enumerate(pieces):
            if index == held:
                await asyncio.wait_for(first_frames.wait(), TIMEOUT_S)
            yield piece

    feeding = asyncio.create_task(spool(chunks(), upload))
    executor = ThreadPoolExecutor(1)
    loop = asyncio.get_running_loop()
    try:
        reader = await loop.run_in_executor(
            executor, CpuVideoReader, upload, EVERY_5, GEOMETRY, limits or VideoLimits(), 4
        )
        got: list[FrameChunk] = []
        written_at_first = 0
        async for chunk, _ in read_chunks(reader, executor):
            if not got:
                written_at_first = upload.written
                first_frames.set()
            got.append(chunk)
        await feeding
    finally:
        feeding.cancel()
        upload.close()
        executor.shutdown(wait=False)
    frames = FrameChunk(
        np.concatenate([c.indices for c in got]),
        np.concatenate([c.timestamps for c in got]),
        np.concatenate([c.tensors for c in got]),
    )
    return Decoded(frames, written_at_first)


def from_memory(data: bytes) -> FrameChunk:
    reader = CpuVideoReader(data, EVERY_5, GEOMETRY, VideoLimits(), chunk=4)
    chunks = list(reader.frames())
    reader.close()
    return FrameChunk(
        np.concatenate([c.indices for c in chunks]),
        np.concatenate([c.timestamps for c in chunks]),
        np.concatenate([c.tensors for c in chunks]),
    )


@pytest.mark.parametrize("codec", media.PROGRESSIVE_CODECS)
async def test_frames_come_out_before_the_upload_ends(codec: str) -> None:
    data = long_video(codec)
    # mkv and webm start without knowing the length; an mp4 with its index first needs it
    stated = codec.endswith("mp4")
    decoded = await decode_while_uploading(data, stated=stated, hold_back=0.2)
    assert decoded.written_at_first < len(data)
    expected = from_memory(data)
    assert decoded.frames.indices.tolist() == list(range(0, 100, 5))
    np.testing.assert_array_equal(decoded.frames.indices, expected.indices)
    np.testing.assert_allclose(decoded.frames.timestamps, expected.timestamps)
    np.testing.assert_array_equal(decoded.frames.tensors, expected.tensors)


@pytest.mark.parametrize("codec", ["mpeg4_mp4", "h264_mp4"])
async def test_an_mp4_with_its_index_at_the_end_decodes_once_the_index_arrives(codec: str) -> None:
    data = video(codec)
    assert data.find(b"moov") > data.find(b"mdat")  # the index is at the end
    decoded = await decode_while_uploading(data, stated=True)
    assert decoded.written_at_first == len(data)  # the whole upload was needed first
    np.testing.assert_array_equal(decoded.frames.tensors, from_memory(data).tensors)


async def open_partly(
    data: bytes, arrived: int, chunk: int, window: int | None = None
) -> tuple[UploadStream, ThreadPoolExecutor, CpuVideoReader]:
    """An upload of which the first ``arrived`` bytes of ``data`` have come, and a reader of it
    (``chunk`` frames at most per chunk) opened on a thread of its own."""
    upload = UploadStream() if window is None else UploadStream(window=window)
    await upload.append(data[:arrived])
    executor = ThreadPoolExecutor(1)
    loop = asyncio.get_running_loop()
    reader = await loop.run_in_executor(
        executor, CpuVideoReader, upload, EVERY_5, GEOMETRY, VideoLimits(), chunk
    )
    return upload, executor, reader


async def test_frames_leave_as_decoded_and_batch_up_only_while_the_caller_is_busy() -> None:
    # A chunk of 16 sampled frames would need the whole video; what is decoded leaves at once.
    data = long_video("vp9_webm")
    upload, executor, reader = await open_partly(data, len(data) * 3 // 4, 1)
    chunks = read_as_decoded(reader, executor, limit=32)
    first, _ = await asyncio.wait_for(anext(chunks), TIMEOUT_S)
    assert 0 < len(first) < 16
    # The caller is busy: decoding goes on until it waits for the sender.
    await wait_for_state(lambda: upload.reader_waiting, TIMEOUT_S, "decoding to wait")
    await upload.append(data[len(data) * 3 // 4 :])
    upload.finish()
    rest = [chunk async for chunk, _ in chunks]
    executor.shutdown(wait=False)
    assert max(len(c) for c in rest) > 1  # what waited was taken in one piece
    assert [i for c in (first, *rest) for i in c.indices] == list(range(0, 100, 5))
    assert upload.released  # the reader was closed, on its thread


async def test_an_mkv_of_unknown_length_starts_too() -> None:
    data = long_video("vp9_mkv")
    decoded = await decode_while_uploading(data, stated=False, hold_back=0.2)
    assert decoded.written_at_first < len(data)


async def test_a_failed_upload_ends_decoding_with_why() -> None:
    data = video("vp9_webm")
    upload, executor, reader = await open_partly(data, len(data) // 2, 4, window=16 * CHUNK_BYTES)
    upload.fail(ConnectionResetError("the client went away"))
    with pytest.raises(ConnectionResetError, match="went away"):
        async for _ in read_as_decoded(reader, executor, limit=4):
            pass
    executor.shutdown(wait=False)


async def test_a_caller_that_leaves_stops_decoding_and_the_reader_is_closed() -> None:
    data = long_video("vp9_webm")
    upload, executor, reader = await open_partly(data, len(data) * 3 // 4, 1)
    chunks = read_as_decoded(reader, executor, limit=2)
    await anext(chunks)
    await chunks.aclose()  # the decoding thread may wait for room, or for the sender
    upload.fail(ConnectionResetError("the caller left"))  # what a service does then
    await wait_for_state(lambda: upload.released, TIMEOUT_S, "the reader to be closed")
    executor.shutdown(wait=True)


async def test_limits_apply_while_the_upload_arrives() -> None:
    # The duration (and the frame count) are checked against what decoding finds, so a long
    # upload is refused while it arrives, by name.
    data = video("vp9_mkv")  # 3 s
    with pytest.raises(DecodeError, match=r"the limit \(max_video_duration_s\) is 2"):
        await decode_while_uploading(data, stated=False, limits=VideoLimits(max_duration_s=2.0))
    upload = UploadStream(max_bytes=len(data) // 2, window=16 * CHUNK_BYTES)
    with pytest.raises(DecodeError, match=r"\(max_video_stream_bytes\)"):
        await decode_while_uploading(data, stated=False, upload=upload)


async def test_garbage_and_an_empty_upload_are_refused() -> None:
    with pytest.raises(DecodeError, match="not a recognised video"):
        await decode_while_uploading(b"this is not a video at all" * 400, stated=False)
    upload = UploadStream()
    upload.finish()
    with pytest.raises(DecodeError, match="empty video"):
        CpuVideoReader(upload, EVERY_5, GEOMETRY, VideoLimits())
