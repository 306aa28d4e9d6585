"""Where a video's frames come from (:class:`FrameSource`), the chunks they come in, and the
source that decodes them in this process.

A video in chunks, decoded here, is spooled to a temporary file as it arrives
(:class:`~inferline.imaging.upload.UploadStream`); decoded at the preprocess service, its chunks
are forwarded as they arrive (:mod:`middleman.remote_frames`). Either way, when the decoder is
behind, the client's stream is not read, and gRPC's flow control slows the sender: memory holds
a few chunks, whatever the video's size.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, TypeAlias

import numpy as np
import numpy.typing as npt

from inferline.errors import invalid
from inferline.imaging.decode import DecodeError, Geometry
from inferline.imaging.streaming import VideoReader, read_as_decoded, read_chunks
from inferline.imaging.upload import UploadStream
from inferline.imaging.video import CpuVideoReader, FrameChunk, Sampling, VideoLimits
from inferline.sequence import ChunkedVideo, spooled
from middleman.pipeline import Pixels

Video: TypeAlias = bytes | ChunkedVideo  # a whole file, or one arriving in chunks


@dataclass(frozen=True)
class ScoredChunk:
    """Frames classified where they were decoded (in a GPU pod): the model's scores per frame."""

    indices: npt.NDArray[np.int64]
    timestamps: npt.NDArray[np.float64]
    scores: npt.NDArray[np.float32]  # [k, classes]

    def __len__(self) -> int:
        return len(self.indices)


@dataclass(frozen=True)
class PixelChunk:
    """Frames decoded at the preprocess service, as the wire carried them."""

    indices: npt.NDArray[np.int64]
    timestamps: npt.NDArray[np.float64]
    pixels: Pixels

    def __len__(self) -> int:
        return len(self.indices)


Chunks: TypeAlias = FrameChunk | PixelChunk | ScoredChunk
Frames: TypeAlias = AbstractAsyncContextManager[AsyncIterator[Chunks]]


class FrameSource(Protocol):
    def __call__(
        self, video: Video, parameters: Mapping[str, object], time_left: float | None
    ) -> Frames:
        """``video``'s sampled frames, a chunk at a time, while the context is open. A video in
        chunks is read to its end when the context closes (its frames all answered)."""
        ...

    async def close(self) -> None: ...


class InProcessFrames:
    """Decodes and samples on this process's threads (OpenCV / FFmpeg)."""

    def __init__(
        self,
        geometry: Geometry,
        limits: VideoLimits,
        sampling: Sampling,
        max_samples: int,
        chunk: int,
        threads: int,
    ) -> None:
        self.geometry, self.limits, self.sampling = geometry, limits, sampling
        self.max_samples, self.chunk = max_samples, chunk
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="video")

    @contextlib.asynccontextmanager
    async def __call__(
        self, video: Video, parameters: Mapping[str, object], time_left: float | None
    ) -> AsyncIterator[AsyncIterator[FrameChunk]]:
        try:
            sampling = self.sampling.with_parameters(parameters, self.max_samples)
        except ValueError as exc:
            raise invalid(f"video sampling: {exc}") from None
        if isinstance(video, bytes):
            frames = self._decoded(video, sampling, self.executor)
            try:
                yield frames
            finally:
                await frames.aclose()
            return
        try:
            async with spooled(video, self.limits.max_stream_bytes) as spool:
                frames = self._decoded(spool.stream, sampling, spool.executor, as_decoded=True)
                try:
                    yield frames
                finally:
                    await frames.aclose()
        except DecodeError as exc:  # the length its sender stated is over the cap
            raise invalid(f"video: {exc}") from None

    async def _decoded(
        self,
        source: bytes | UploadStream,
        sampling: Sampling,
        executor: ThreadPoolExecutor,
        as_decoded: bool = False,
    ) -> AsyncGenerator[FrameChunk, None]:
        """``source``'s frames a chunk at a time; ``as_decoded``: each frame leaves as soon as
        it is decoded, batched up to a chunk only while the caller is busy (an upload)."""
        loop = asyncio.get_running_loop()
        chunk = 1 if as_decoded else self.chunk

        def open_reader() -> VideoReader:
            return CpuVideoReader(source, sampling, self.geometry, self.limits, chunk)

        try:
            reader = await loop.run_in_executor(executor, open_reader)
            if as_decoded:
                decoded = read_as_decoded(reader, executor, self.chunk)
            else:
                decoded = read_chunks(reader, executor)
            async with contextlib.aclosing(decoded):  # stops decoding when the caller does
                async for frames, _ in decoded:
                    yield frames
        except DecodeError as exc:
            raise invalid(f"video: {exc}") from None

    async def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)
