"""A video that arrives in chunks while FFmpeg reads it. No gRPC here.

:class:`UploadStream` is the file-like object OpenCV's FFmpeg reads (``read``, ``seek``,
``tell``; blocking, on a worker thread) while the event loop writes the chunks as they arrive
(:meth:`UploadStream.append`, then :meth:`~UploadStream.finish` or :meth:`~UploadStream.fail`).
The bytes go to an unlinked temporary file (``TMPDIR``), so memory holds one chunk at a time
whatever the video's size, and a reader may seek back (an mp4 whose index comes last is read
from its end, then from its start). The disk is capped (``max_bytes``, refused by name).

Reading:

* a read returns what has arrived from the position on, up to the size asked for; when
  nothing has, it waits until something does, or the upload ends (then it returns b"": the end
  of the video), or fails;
* ``seek`` only moves the position, so a demuxer can skip ahead of the upload;
* ``seek(0, SEEK_END)`` answers the length once it is known: the upload ended, or its sender
  stated the length beforehand. Before that it answers -1 (length unknown), which FFmpeg takes
  for a stream of unknown length. It does not wait: FFmpeg asks for the length when it opens
  any container, and waiting there would hold the first frame back until the whole upload
  arrived;
* nothing raises into the reader (a decoder in C): a failed or closed upload reads as its end,
  and :meth:`~UploadStream.check` raises the failure for the Python code around the decoder.

Backpressure: :meth:`~UploadStream.append` waits while the upload is ``window`` bytes ahead of
the furthest the reader has read, unless the reader itself waits for bytes not yet written (a
demuxer looking for an index at the end must get there). The caller stops reading its network
stream meanwhile, so flow control slows the sender to the decoder's pace.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import tempfile
import threading
from collections.abc import AsyncIterable, AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from inferline.imaging.decode import DecodeError

MiB = 1024 * 1024
WINDOW_BYTES = 8 * MiB  # how far the upload may run ahead of the decoder
DEFAULT_MAX_BYTES = 2 * 1024 * MiB


class UploadStream(io.BufferedIOBase):
    """One upload, spooled to disk: written from the event loop, read from one worker thread.

    ``size``: the length the sender stated before sending (or None); writing more, or ending
    with less, is refused. ``setting`` names the cap in refusals.
    """

    def __init__(
        self,
        max_bytes: int = DEFAULT_MAX_BYTES,
        *,
        size: int | None = None,
        window: int = WINDOW_BYTES,
        directory: str | None = None,
        setting: str = "max_video_stream_bytes",
    ) -> None:
        super().__init__()
        if size is not None and size > max_bytes:
            raise DecodeError(
                "too_large",
                f"the video is {size} bytes (video_bytes); the limit ({setting}) is {max_bytes}",
            )
        self.max_bytes, self.size, self.window, self.setting = max_bytes, size, window, setting
        # Unlinked at once; closed by release() when no read or write is using it any more.
        self._file = tempfile.TemporaryFile(dir=directory, buffering=0)  # noqa: SIM115
        self._state = threading.Condition()
        self._written = 0  # bytes on disk, [0, written) readable
        self._position = 0  # the reader's
        self._read_to = 0  # the furthest the reader has read
        self._reader_waits = False  # for bytes not written yet
        self._ended = False
        self._error: BaseException | None = None
        self._released = False  # the reader is done: nothing more is kept
        self._io = 0  # reads and writes of the file in progress; the last one out closes it
        self._loop: asyncio.AbstractEventLoop | None = None
        self._room: asyncio.Event | None = None  # set when a waiting writer may go on

    # -- the event loop's side ------------------------------------------------------------------

    @property
    def written(self) -> int:
        """Bytes received so far."""
        return self._written

    @property
    def reader_waiting(self) -> bool:
        """The reader waits for bytes that have not arrived."""
        return self._reader_waits

    @property
    def writer_waiting(self) -> bool:
        """The writer waits for the reader to catch up (the window is full)."""
        return self._room is not None

    @property
    def released(self) -> bool:
        return self._released

    async def append(self, chunk: bytes | bytearray | memoryview) -> None:
        """Append the next chunk, once the window allows. Raises DecodeError (the cap, or more
        than the stated size: the upload is failed with it too) or OSError (the disk)."""
        data = memoryview(chunk).cast("B")
        if not data or self._released:
            return  # once the reader is done, the rest is drained, not kept
        try:
            self._check_length(self._written + len(data))
            await self._wait_for_room()
            if self._released:
                return
            await asyncio.to_thread(self._pwrite, data, self._written)
        except BaseException as exc:
            self.fail(exc)
            raise
        with self._state:
            self._written += len(data)
            self._state.notify_all()

    def finish(self) -> None:
        """The upload is complete: the reader reads to its end. Raises DecodeError when the
        sender stated another size (the upload is failed with it)."""
        if self.size is not None and self._written != self.size and not self._released:
            error = DecodeError(
                "truncated",
                f"the upload ended after {self._written} bytes; its first chunk said the video "
                f"is {self.size} (video_bytes)",
            )
            self.fail(error)
            raise error
        with self._state:
            self._ended = True
            self._state.notify_all()

    def fail(self, error: BaseException) -> None:
        """The upload will not complete: the reader reads its end, and :meth:`check` raises
        ``error`` (the first failure is kept). Safe from any thread."""
        with self._state:
            if self._error is None and not self._ended:
                self._error = error
            self._state.notify_all()
        self._wake_writer()

    def _check_length(self, length: int) -> None:
        if length > self.max_bytes:
            raise DecodeError(
                "too_large",
                f"the upload passed {self.max_bytes} bytes; the limit ({self.setting}) is "
                f"{self.max_bytes}",
            )
        if self.size is not None and length > self.size:
            raise DecodeError(
                "truncated",
                f"the upload passed the {self.size} bytes its first chunk said the video is "
                "(video_bytes)",
            )

    async def _wait_for_room(self) -> None:
        while True:
            with self._state:
                ahead = self._written - self._read_to
                if (
                    ahead < self.window
                    or self._reader_waits
                    or self._released
                    or self._error is not None
                ):
                    self._room = None
                    error = self._error
                    break
                self._loop = asyncio.get_running_loop()
                self._room = room = asyncio.Event()  # a fresh one per wait
            await room.wait()
        if error is not None:
            raise error

    def _wake_writer(self) -> None:
        room, loop = self._room, self._loop
        if room is None or loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits any more
            loop.call_soon_threadsafe(room.set)

    # -- the reader's side (blocking, one worker thread) ------------------------------------------

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move the position; never waits. SEEK_END: the length, or -1 while it is unknown."""
        with self._state:
            if whence == io.SEEK_SET:
                target = offset
            elif whence == io.SEEK_CUR:
                target = self._position + offset
            elif whence == io.SEEK_END:
                length = self._written if self._ended else self.size
                if length is None:
                    return -1
                target = length + offset
            else:
                return -1
            if target < 0:
                return -1
            self._position = target
            return target

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes from the position: those that have arrived, waiting only while
        none has (-1: all to the end, waiting for the end); b"" at the end of the upload, and
        once it failed or was released."""
        with self._state:
            start = self._position
            wanted = None if size is None or size < 0 else size
            while not self._readable_now(start, wanted):
                self._reader_waits = True
                self._wake_writer()
                self._state.wait()
            self._reader_waits = False
            if self._error is not None or self._released:
                return b""
            stop = self._written if wanted is None else min(start + wanted, self._written)
            if stop <= start:
                return b""
            self._io += 1
        try:
            data = os.pread(self._file.fileno(), stop - start, start)
        finally:
            self._io_done()
        with self._state:
            self._position = start + len(data)
            if self._position > self._read_to:
                self._read_to = self._position
                if self._written - self._read_to < self.window:
                    self._wake_writer()  # only does anything while the writer waits
        return data

    def read1(self, size: int = -1) -> bytes:
        return self.read(size)

    def _readable_now(self, start: int, wanted: int | None) -> bool:
        if self._error is not None or self._released or self._ended or wanted == 0:
            return True
        return wanted is not None and start < self._written

    def head(self, count: int) -> bytes:
        """The first ``count`` bytes (fewer if the video is shorter), waiting for them; the
        position does not move. Raises the upload's failure."""
        with self._state:
            while not (self._ended or self._error or self._released or self._written >= count):
                self._state.wait()
            self.check()
            stop = min(count, self._written)
            if self._released or stop <= 0:
                return b""
            self._io += 1
        try:
            return os.pread(self._file.fileno(), stop, 0)
        finally:
            self._io_done()

    def check(self) -> None:
        """Raise the upload's failure, if it failed."""
        if self._error is not None:
            raise self._error

    # -- both ---------------------------------------------------------------------------------

    def _pwrite(self, data: memoryview, offset: int) -> None:
        with self._state:
            if self._released:
                return
            self._io += 1
        try:
            fd = self._file.fileno()
            while data:
                count = os.pwrite(fd, data, offset)
                data, offset = data[count:], offset + count
        finally:
            self._io_done()

    def _io_done(self) -> None:
        with self._state:
            self._io -= 1
            if self._released and self._io == 0:
                self._file.close()

    def release(self) -> None:
        """The reader is done: the spool is deleted now (or when a read or write in progress
        ends), reads answer b"", and further writes are accepted and dropped."""
        with self._state:
            self._released = True
            if self._io == 0:
                self._file.close()
            self._state.notify_all()
        self._wake_writer()

    def close(self) -> None:
        self.release()
        super().close()


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


@dataclass(frozen=True)
class Spool:
    """An upload spooling while it is decoded: the decoder reads ``stream`` on ``executor``'s
    one thread. Its reads wait for the sender: a thread of its own, never one others need."""

    stream: UploadStream
    executor: ThreadPoolExecutor


@contextlib.asynccontextmanager
async def spooling(
    chunks: AsyncIterable[bytes],
    max_bytes: int,
    size: int | None = None,
    *,
    unneeded: tuple[type[BaseException], ...] = (),
) -> AsyncIterator[Spool]:
    """Spool ``chunks`` into a new :class:`UploadStream` (capped at ``max_bytes``, of the
    ``size`` its sender stated) as they arrive, while the body decodes it (a failure of the
    chunks reaches the decoder through ``stream.check()``). When the body is done the stream is
    released and the rest of ``chunks`` is read and dropped; ``unneeded`` failures of that rest
    are ignored (nothing more was needed). If the body fails, the spool is cancelled. Raises
    DecodeError at once when ``size`` is over ``max_bytes``; OSError when the disk fails."""
    upload = UploadStream(max_bytes, size=size)
    executor = ThreadPoolExecutor(1, thread_name_prefix="video-upload")
    feeding = asyncio.create_task(spool(chunks, upload))
    try:
        yield Spool(upload, executor)
        upload.release()
        with contextlib.suppress(*unneeded):
            await feeding
    finally:
        upload.release()
        if not feeding.done():
            feeding.cancel()
        elif not feeding.cancelled():
            feeding.exception()  # raised already, through the upload: retrieved here
        executor.shutdown(wait=False)
