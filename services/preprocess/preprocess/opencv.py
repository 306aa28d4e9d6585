"""The CPU backends: :mod:`inferline.imaging` on a thread pool (OpenCV releases the GIL)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from inferline.imaging.decode import DecodeError, Geometry, Limits, decode_image
from inferline.imaging.streaming import VideoReader
from inferline.imaging.upload import UploadStream
from inferline.imaging.video import CpuVideoReader, Sampling, VideoLimits
from preprocess.backends import Decoded, decode_in_parts


class OpenCVBackend:
    """A request's images cut into one slice per worker thread: every core busy, and one
    wake-up of the event loop per slice, not per image."""

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

    async def decode(
        self, images: Sequence[bytes], out: npt.NDArray[np.uint8] | None = None
    ) -> Decoded:
        return await decode_in_parts(
            images, self.geometry, self.workers, self.executor, self._decode_part, out
        )

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


class CpuVideoBackend:
    """Video on the CPU: OpenCV's FFmpeg decodes, :mod:`inferline.imaging.video` samples."""

    name = "opencv"

    def __init__(self, geometry: Geometry, limits: VideoLimits, chunk: int) -> None:
        self.geometry, self.limits, self.chunk = geometry, limits, chunk

    def open(self, data: bytes, sampling: Sampling) -> VideoReader:
        return CpuVideoReader(data, sampling, self.geometry, self.limits, self.chunk)

    def open_stream(self, upload: UploadStream, sampling: Sampling) -> VideoReader:
        # A frame a read: read_as_decoded batches them up to a chunk while its caller is busy
        return CpuVideoReader(upload, sampling, self.geometry, self.limits, chunk=1)
