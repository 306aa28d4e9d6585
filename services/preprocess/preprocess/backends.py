"""What every decoding backend is: the interfaces, a batch's result, the settings. No gRPC here.

The backends themselves: :mod:`preprocess.opencv` (CPU, always there) and
:mod:`preprocess.dali` (NVIDIA DALI, GPU or CPU); :mod:`preprocess.choice` picks one. Every
backend checks the limits from the header first (:func:`inferline.imaging.decode.probe`, then
the pixel budget for the size it would decode the image at), gives the same geometry, and
reports a bad image in its own slot so that it never fails its batch-mates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from inferline.imaging.decode import DecodeError, Geometry, Limits
from inferline.imaging.streaming import VideoReader
from inferline.imaging.upload import UploadStream
from inferline.imaging.video import Sampling, VideoLimits


@dataclass
class Decoded:
    """A batch's tensors (a failed image's row is zeros) and, per image, its error or None."""

    tensors: npt.NDArray[np.uint8]  # [N, 3, crop, crop]
    errors: list[DecodeError | None]

    @classmethod
    def empty(
        cls, count: int, geometry: Geometry, out: npt.NDArray[np.uint8] | None = None
    ) -> Decoded:
        """Room for ``count`` images: ``out`` when given (shared memory, decoded into in
        place; it must be ``[count, 3, crop, crop]``), else a new array of zeros."""
        shape = (count, 3, geometry.crop, geometry.crop)
        if out is None:
            return cls(np.zeros(shape, dtype=np.uint8), [None] * count)
        if out.shape != shape or out.dtype != np.uint8:
            raise ValueError(f"out is {out.dtype} {list(out.shape)}; expected uint8 {list(shape)}")
        return cls(out, [None] * count)

    def messages(self) -> list[bytes]:
        """``ERRORS``: per image, b"" when it decoded, else why it was refused."""
        return [b"" if e is None else str(e).encode() for e in self.errors]


class ImageBackend(Protocol):
    name: str

    async def decode(
        self, images: Sequence[bytes], out: npt.NDArray[np.uint8] | None = None
    ) -> Decoded:
        """Decode ``images`` (into ``out`` when given: a failed image's row is zeroed)."""
        ...

    def close(self) -> None: ...


class VideoBackend(Protocol):
    name: str

    def open(self, data: bytes, sampling: Sampling) -> VideoReader:
        """Check the limits and open ``data`` (blocking: call it from a worker thread)."""
        ...

    def open_stream(self, upload: UploadStream, sampling: Sampling) -> VideoReader:
        """Open a video that is still arriving, decoded as it does (blocking, and its reads
        wait for the upload: call it from a worker thread of its own)."""
        ...


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


DecodePart = Callable[["Decoded", Sequence[bytes], int, int], None]
"""Decodes ``images[start:stop]`` into a batch's result (blocking; on a worker thread)."""


async def decode_in_parts(
    images: Sequence[bytes],
    geometry: Geometry,
    parts: int,
    executor: ThreadPoolExecutor,
    decode_part: DecodePart,
    into: npt.NDArray[np.uint8] | None = None,
) -> Decoded:
    """``images`` cut into at most ``parts`` slices, each decoded on ``executor`` at once:
    one wake-up of the event loop per slice, not per image. A failed image's row is zeros."""
    out = Decoded.empty(len(images), geometry, into)
    loop = asyncio.get_running_loop()
    await asyncio.gather(
        *(
            loop.run_in_executor(executor, decode_part, out, images, start, stop)
            for start, stop in split(len(images), parts)
        )
    )
    if into is not None:  # rows of the slot's last batch
        for index, error in enumerate(out.errors):
            if error is not None:
                out.tensors[index] = 0
    return out
