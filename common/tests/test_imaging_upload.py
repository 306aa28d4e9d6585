"""The upload stream FFmpeg reads while its chunks arrive: blocking reads, seeks that never wait,
the end, failures, the disk cap and the window that holds the writer back."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest

from inferline.imaging.decode import DecodeError
from inferline.imaging.upload import UploadStream, spool
from inferline_testing.waits import wait_for_state

T = TypeVar("T")
TIMEOUT_S = 10.0


@pytest.fixture
async def upload() -> AsyncIterator[UploadStream]:
    stream = UploadStream(max_bytes=1000, window=100)
    yield stream
    stream.close()


def in_thread(call: Callable[[], T]) -> asyncio.Future[T]:
    """``call()`` on a worker thread of its own, as the decoder runs (reads block)."""
    executor = ThreadPoolExecutor(1)
    future = asyncio.get_running_loop().run_in_executor(executor, call)
    executor.shutdown(wait=False)
    return future


async def reader_waits(upload: UploadStream) -> None:
    await wait_for_state(lambda: upload.reader_waiting, TIMEOUT_S, "the reader waiting")


async def test_a_read_gives_what_has_arrived_and_waits_only_for_nothing(
    upload: UploadStream,
) -> None:
    await upload.append(b"01234")
    assert upload.read(8) == b"01234"  # what there is, at once
    read = in_thread(lambda: upload.read(8))
    await reader_waits(upload)  # nothing beyond the position: it waits
    assert not read.done()
    await upload.append(b"56789")
    assert await asyncio.wait_for(read, TIMEOUT_S) == b"56789"
    assert upload.tell() == 10


async def test_the_end_of_the_upload_ends_a_read(upload: UploadStream) -> None:
    await upload.append(b"abc")
    assert upload.read(100) == b"abc"
    read = in_thread(lambda: upload.read(100))
    await reader_waits(upload)
    upload.finish()
    assert await asyncio.wait_for(read, TIMEOUT_S) == b""  # the end, for good
    assert upload.seek(1) == 1 and upload.read() == b"bc"
    upload.check()  # ended, not failed


async def test_seek_moves_without_waiting_and_the_length_is_unknown_until_known() -> None:
    upload = UploadStream(max_bytes=1000)
    await upload.append(b"abcdef")
    assert upload.seek(500) == 500  # past what has arrived: allowed, and no wait
    assert upload.seek(-496, io.SEEK_CUR) == 4
    assert upload.read(2) == b"ef"
    assert upload.seek(0, io.SEEK_END) == -1  # unknown: a stream of unknown length to FFmpeg
    assert upload.seek(-1) == -1 and upload.tell() == 6  # refused, nothing moved
    upload.finish()
    assert upload.seek(-2, io.SEEK_END) == 4
    upload.close()
    stated = UploadStream(max_bytes=1000, size=300)  # its sender said how long it is
    assert stated.seek(0, io.SEEK_END) == 300
    stated.close()


async def test_a_failed_upload_reads_as_its_end_and_check_raises_why(
    upload: UploadStream,
) -> None:
    await upload.append(b"abc")
    upload.seek(3)
    read = in_thread(lambda: upload.read(10))
    await reader_waits(upload)
    why = RuntimeError("the sender went away")
    upload.fail(why)
    assert await asyncio.wait_for(read, TIMEOUT_S) == b""  # never raises into the decoder
    with pytest.raises(RuntimeError, match="the sender went away"):
        upload.check()
    upload.fail(ValueError("later"))  # the first failure is the one kept
    with pytest.raises(RuntimeError):
        upload.check()


async def test_head_waits_for_the_first_bytes_without_moving(upload: UploadStream) -> None:
    head = in_thread(lambda: upload.head(4))
    await upload.append(b"ab")
    await upload.append(b"cdef")
    assert await asyncio.wait_for(head, TIMEOUT_S) == b"abcd"
    assert upload.tell() == 0


async def test_the_window_holds_the_writer_until_the_reader_catches_up(
    upload: UploadStream,
) -> None:
    await upload.append(b"x" * 100)  # the window (100 bytes ahead of the reader) is full
    writing = asyncio.create_task(upload.append(b"y" * 10))
    await wait_for_state(lambda: upload.writer_waiting, TIMEOUT_S, "the writer waiting")
    assert not writing.done() and upload.written == 100  # held back: nothing more kept
    assert await in_thread(lambda: upload.read(50)) == b"x" * 50
    await asyncio.wait_for(writing, TIMEOUT_S)
    assert upload.written == 110


async def test_a_reader_waiting_past_the_window_lets_the_writer_on(upload: UploadStream) -> None:
    # A demuxer looking for an mp4's index at the end must get there: no deadlock.
    await upload.append(b"x" * 100)
    upload.seek(250)
    read = in_thread(lambda: upload.read(10))
    for _ in range(3):
        await asyncio.wait_for(upload.append(b"y" * 100), TIMEOUT_S)
    assert await asyncio.wait_for(read, TIMEOUT_S) == b"y" * 10


async def test_the_disk_cap_is_refused_by_name_and_fails_the_upload() -> None:
    upload = UploadStream(max_bytes=10, setting="max_video_stream_bytes")
    await upload.append(b"0123456789")
    with pytest.raises(DecodeError, match=r"the limit \(max_video_stream_bytes\) is 10") as caught:
        await upload.append(b"!")
    assert caught.value.kind == "too_large"
    with pytest.raises(DecodeError, match="max_video_stream_bytes"):
        upload.check()  # the reader learns why
    with pytest.raises(DecodeError, match=r"\(max_video_stream_bytes\) is 10"):
        UploadStream(max_bytes=10, size=11)  # stated beforehand: refused at once
    upload.close()


async def test_the_stated_length_is_held_to() -> None:
    longer = UploadStream(max_bytes=100, size=4)
    with pytest.raises(DecodeError, match="passed the 4 bytes its first chunk said"):
        await longer.append(b"abcde")
    shorter = UploadStream(max_bytes=100, size=4)
    await shorter.append(b"abc")
    with pytest.raises(DecodeError, match=r"ended after 3 bytes; its first chunk said .* is 4"):
        shorter.finish()
    with pytest.raises(DecodeError):
        shorter.check()
    longer.close()
    shorter.close()


async def test_released_it_keeps_nothing_and_answers_its_end(upload: UploadStream) -> None:
    await upload.append(b"abc")
    upload.seek(3)
    read = in_thread(lambda: upload.read(10))
    await reader_waits(upload)
    upload.release()  # the decoder is done (its sampling, say)
    assert await asyncio.wait_for(read, TIMEOUT_S) == b""
    await upload.append(b"d" * 500)  # drained: accepted, dropped, never held back
    assert upload.written == 3 and upload.read(1) == b""
    upload.finish()


async def test_spool_writes_each_chunk_then_finishes(upload: UploadStream) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"ab"
        yield b"cd"

    await spool(chunks(), upload)
    assert upload.read() == b"abcd"


async def test_spool_fails_the_upload_with_what_broke_the_chunks(upload: UploadStream) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"ab"
        raise ValueError("a chunk with another sequence_id")

    with pytest.raises(ValueError):
        await spool(chunks(), upload)
    assert upload.read(10) == b""
    with pytest.raises(ValueError, match="another sequence_id"):
        upload.check()
