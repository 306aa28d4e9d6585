"""A video reader's chunks, decoded on a worker thread one chunk ahead of the caller; an upload
spooled from its chunks as they arrive (:func:`spool`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from inferline.imaging.upload import UploadStream
from inferline.imaging.video import FrameChunk, VideoHeader


class VideoReader(Protocol):
    """One open video: blocking reads of its sampled frames, a chunk at a time."""

    backend: str
    header: VideoHeader

    def read_chunk(self) -> FrameChunk | None: ...

    def close(self) -> None: ...


async def read_chunks(
    reader: VideoReader, executor: ThreadPoolExecutor
) -> AsyncIterator[tuple[FrameChunk, float]]:
    """``reader``'s chunks, each with its decoding seconds, read on ``executor`` one chunk ahead
    (the next decodes while the caller handles this one). Closes the reader when done, never
    under a read still running on a worker thread. Raises DecodeError."""
    loop = asyncio.get_running_loop()

    def timed() -> tuple[FrameChunk | None, float]:
        start = time.perf_counter()
        chunk = reader.read_chunk()
        return chunk, time.perf_counter() - start

    pending = loop.run_in_executor(executor, timed)
    try:
        while True:
            chunk, seconds = await pending
            if chunk is None:
                return
            pending = loop.run_in_executor(executor, timed)
            yield chunk, seconds
    finally:
        _close_after(pending, reader)


def _close_after(pending: asyncio.Future[Any], reader: VideoReader) -> None:
    if not pending.done():
        pending.add_done_callback(lambda _: _close_after(pending, reader))
        return
    if not pending.cancelled():
        pending.exception()  # an abandoned read's error is handled, not "never retrieved"
    reader.close()


async def spool(chunks: AsyncIterable[bytes], upload: UploadStream) -> None:
    """Write ``chunks`` into ``upload`` as they arrive (each write waits for the upload's window,
    so the sender is slowed to the decoder's pace), then finish it. Once the reader is done
    (``upload.release()``) what still arrives is read and dropped. A failure fails the upload,
    so its reader raises it too, and is raised here."""
    try:
        async for chunk in chunks:
            await upload.append(chunk)
        upload.finish()
    except BaseException as exc:
        upload.fail(exc)
        raise
