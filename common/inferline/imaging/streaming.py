"""A video reader's chunks off the event loop.

* :func:`read_chunks`: a whole video's chunks, each decoded on a worker thread while the
  caller handles the one before;
* :func:`read_as_decoded`: a video still arriving, decoded without pause on a thread of its
  own; the caller takes what has been decoded whenever it is ready (a chunk's worth when it is
  the slower, a single frame as soon as one is there when decoding waits for the sender).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from inferline.imaging.video import FrameChunk, VideoHeader


class VideoReader(Protocol):
    """One open video: blocking reads of its sampled frames, a chunk at a time."""

    backend: str
    header: VideoHeader

    def read_chunk(self) -> FrameChunk | None: ...

    def close(self) -> None: ...


async def read_chunks(
    reader: VideoReader, executor: ThreadPoolExecutor
) -> AsyncGenerator[tuple[FrameChunk, float], None]:
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


async def read_as_decoded(
    reader: VideoReader, executor: ThreadPoolExecutor, limit: int
) -> AsyncGenerator[tuple[FrameChunk, float], None]:
    """``reader``'s frames, decoded one read after another on ``executor`` (a thread it holds
    to the end: give it one of its own) into a buffer of at most ``limit`` frames. Each item is
    everything decoded since the caller took the last one, at least one frame and at most
    ``limit``, with its decoding seconds: with a reader of small chunks, results leave as soon
    as they exist, and batch up only while the caller is busy. Closes the reader on that thread
    when it stops. Raises what the reader raises."""
    buffer = _Decoded(asyncio.get_running_loop(), limit)

    def decode() -> None:
        try:
            while not buffer.stopped:
                start = time.perf_counter()
                chunk = reader.read_chunk()
                if chunk is None:
                    break
                buffer.put(chunk, time.perf_counter() - start)
        except BaseException as exc:  # noqa: BLE001 -- relayed: take() raises it on the loop
            buffer.fail(exc)
        finally:
            reader.close()
            buffer.end()

    decoding = asyncio.get_running_loop().run_in_executor(executor, decode)
    try:
        while (item := await buffer.take()) is not None:
            yield item
    finally:
        buffer.stop()  # a decode waiting for room goes on, and stops
        decoding.add_done_callback(lambda f: f.cancelled() or f.exception())


class _Decoded:
    """Frames decoded on a thread, taken by the event loop: at most ``limit`` waiting."""

    def __init__(self, loop: asyncio.AbstractEventLoop, limit: int) -> None:
        self.loop, self.limit = loop, limit
        self.lock = threading.Condition()
        self.chunks: deque[tuple[FrameChunk, float]] = deque()
        self.frames = 0
        self.ended = self.stopped = False
        self.error: BaseException | None = None
        self.ready = asyncio.Event()

    # the decoding thread
    def put(self, chunk: FrameChunk, seconds: float) -> None:
        with self.lock:
            while self.frames >= self.limit and not self.stopped:
                self.lock.wait()
            self.chunks.append((chunk, seconds))
            self.frames += len(chunk)
        self._wake()

    def fail(self, error: BaseException) -> None:
        with self.lock:
            self.error = error

    def end(self) -> None:
        with self.lock:
            self.ended = True
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody takes any more
            self.loop.call_soon_threadsafe(self.ready.set)

    # the event loop
    async def take(self) -> tuple[FrameChunk, float] | None:
        """All that waits (one frame at least), or None at the end; raises the reader's
        failure once the frames before it were taken."""
        while True:
            self.ready.clear()
            with self.lock:
                taken = list(self.chunks)
                self.chunks.clear()
                self.frames = 0
                self.lock.notify_all()
                ended, error = self.ended, self.error
            if taken:
                return _merge(taken)
            if error is not None:
                raise error
            if ended:
                return None
            await self.ready.wait()

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            self.lock.notify_all()


def _merge(taken: list[tuple[FrameChunk, float]]) -> tuple[FrameChunk, float]:
    if len(taken) == 1:
        return taken[0]
    chunks = [chunk for chunk, _ in taken]
    merged = FrameChunk(
        np.concatenate([c.indices for c in chunks]),
        np.concatenate([c.timestamps for c in chunks]),
        np.concatenate([c.tensors for c in chunks]),
    )
    return merged, sum(seconds for _, seconds in taken)
