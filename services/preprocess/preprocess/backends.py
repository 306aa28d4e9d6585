"""Decoding backends, and the choice between them. No gRPC here.

``dali-gpu``: DALI with ``device="mixed"`` (nvJPEG, and the hardware JPEG decoder where the GPU
has one); ``dali-cpu``: DALI's CPU operators; ``opencv``: :mod:`preprocess.decode` on a thread
pool. ``auto`` takes the first of these that this machine can run. Every backend checks the
limits from the header first (:func:`preprocess.decode.probe`), gives the same geometry, and
reports a bad image in its own slot so that it never fails its batch-mates.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from preprocess.decode import DecodeError, Geometry, Limits, decode_image
from preprocess.video import CpuVideoReader, FrameChunk, Sampling, VideoHeader, VideoLimits

logger = logging.getLogger(__name__)


@dataclass
class Decoded:
    """A batch's tensors (a failed image's row is zeros) and, per image, its error or None."""

    tensors: npt.NDArray[np.uint8]  # [N, 3, crop, crop]
    errors: list[DecodeError | None]

    @classmethod
    def empty(cls, count: int, geometry: Geometry) -> Decoded:
        tensors = np.zeros((count, 3, geometry.crop, geometry.crop), dtype=np.uint8)
        return cls(tensors, [None] * count)


class ImageBackend(Protocol):
    name: str

    async def decode(self, images: Sequence[bytes]) -> Decoded: ...

    def close(self) -> None: ...


class VideoReader(Protocol):
    backend: str
    header: VideoHeader

    def read_chunk(self) -> FrameChunk | None: ...

    def close(self) -> None: ...


class VideoBackend(Protocol):
    name: str

    def open(self, data: bytes, sampling: Sampling) -> VideoReader:
        """Check the limits and open ``data`` (blocking: call it from a worker thread)."""
        ...


class BackendUnavailable(RuntimeError):
    """The configured backend cannot run here; the message says why and what to do."""


# -- the choice -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Machine:
    dali: bool  # nvidia-dali importable
    gpus: int  # CUDA devices DALI can see


def detect() -> Machine:
    """What this machine can run: DALI installed? How many GPUs does it see?"""
    try:
        from nvidia.dali import backend as dali_backend
    except ImportError:
        return Machine(dali=False, gpus=0)
    try:
        gpus = int(dali_backend.GetCUDADeviceCount())  # type: ignore[attr-defined]
    except RuntimeError as exc:  # no driver, or a broken one: a CPU machine for our purposes
        logger.debug("DALI cannot count CUDA devices: %s", exc)
        gpus = 0
    return Machine(dali=True, gpus=gpus)


def choose(requested: str, machine: Machine) -> str:
    """The backend to run: ``requested`` itself, or for ``auto`` the best this machine has."""
    if requested == "auto":
        if machine.dali and machine.gpus > 0:
            return "dali-gpu"
        return "dali-cpu" if machine.dali else "opencv"
    if requested.startswith("dali") and not machine.dali:
        raise BackendUnavailable(
            f"backend {requested!r} needs NVIDIA DALI (pip install nvidia-dali-cuda120); "
            "it is not installed — use backend 'opencv' or 'auto'"
        )
    if requested == "dali-gpu" and machine.gpus == 0:
        raise BackendUnavailable(
            "backend 'dali-gpu' needs a CUDA GPU and DALI sees none — use 'dali-cpu' or 'auto'"
        )
    return requested


# -- OpenCV -----------------------------------------------------------------------------------


def split(count: int, parts: int) -> list[tuple[int, int]]:
    """``range(count)`` cut into at most ``parts`` contiguous, nearly equal, non-empty slices."""
    parts = max(1, min(parts, count))
    size, extra = divmod(count, parts)
    bounds, start = [], 0
    for part in range(parts):
        stop = start + size + (part < extra)
        bounds.append((start, stop))
        start = stop
    return bounds


class OpenCVBackend:
    """A request's images cut into one slice per worker thread (OpenCV releases the GIL while
    it decodes): every core busy, and one wake-up of the event loop per slice, not per image."""

    name = "opencv"

    def __init__(self, geometry: Geometry, limits: Limits, workers: int) -> None:
        self.geometry, self.limits, self.workers = geometry, limits, workers
        self.executor = ThreadPoolExecutor(workers, thread_name_prefix="opencv")

    def _decode_part(self, out: Decoded, images: Sequence[bytes], start: int, stop: int) -> None:
        for index in range(start, stop):
            try:
                out.tensors[index] = decode_image(images[index], self.geometry, self.limits)
            except DecodeError as exc:
                out.errors[index] = exc

    async def decode(self, images: Sequence[bytes]) -> Decoded:
        out = Decoded.empty(len(images), self.geometry)
        loop = asyncio.get_running_loop()
        await asyncio.gather(
            *(
                loop.run_in_executor(self.executor, self._decode_part, out, images, start, stop)
                for start, stop in split(len(images), self.workers)
            )
        )
        return out

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


class CpuVideoBackend:
    """Video on the CPU: OpenCV's FFmpeg decodes, :mod:`preprocess.video` samples."""

    name = "opencv"

    def __init__(self, geometry: Geometry, limits: VideoLimits, chunk: int) -> None:
        self.geometry, self.limits, self.chunk = geometry, limits, chunk

    def open(self, data: bytes, sampling: Sampling) -> VideoReader:
        return CpuVideoReader(data, sampling, self.geometry, self.limits, self.chunk)


@dataclass(frozen=True)
class BackendSettings:
    geometry: Geometry
    limits: Limits
    video_limits: VideoLimits
    workers: int
    max_batch: int
    gpu_pipelines: int = 2
    device_id: int = 0
    video_chunk: int = 16


def create(name: str, settings: BackendSettings) -> tuple[ImageBackend, VideoBackend]:
    """Build (and warm up) the image and video backends called ``name``."""
    cpu_video = CpuVideoBackend(settings.geometry, settings.video_limits, settings.video_chunk)
    if name == "opencv":
        return OpenCVBackend(settings.geometry, settings.limits, settings.workers), cpu_video
    from preprocess import dali  # imported only here: DALI is optional

    gpu = name == "dali-gpu"
    images = dali.DaliImageBackend(settings, gpu=gpu)
    video: VideoBackend = dali.DaliVideoBackend(settings, cpu_video) if gpu else cpu_video
    return images, video


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
