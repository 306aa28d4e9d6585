"""NVIDIA DALI backends: images and video on the GPU (``mixed``), images on the CPU. No gRPC here.

Pipelines are built once, fed by ``external_source`` with batches sized to the request (up to
``max_batch``), and reused. A pipeline runs one batch at a time, so each backend keeps a small
pool of them and a thread per pipeline, which keeps the asyncio loop free.

Geometry is computed inside the graph from each decoded image's shape: the centre square that
becomes the crop after scaling the shorter side to ``resize`` is resized straight to
``crop x crop`` (one resampling, antialiased) — the same mapping as
:func:`inferline.imaging.decode.resize_crop`.

A batch that DALI cannot decode raises for the whole batch and leaves the pipeline unusable, so
the pipeline is rebuilt and the batch's images are decoded one by one to find the bad one.
Headers are probed (and the limits checked) before DALI sees anything, which catches almost all
bad input cheaply.

DALI's decoders have no reduced-scale decode (only regions of interest, and the centre square
the crop needs is most of a photo), so DALI decodes every image at full size, and only what
fits the pixel budget at full size. A larger JPEG goes to the CPU core instead, which decodes
it at 1/2-1/8 scale in the DCT domain within the same budget (or refuses it, naming the size
it would decode): the rare 50-200 MP photo costs ~0.1-0.4 s of one core there, instead of
DALI's buffers growing to hold it at full size, for good.
"""

from __future__ import annotations

import functools
import logging
import queue
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import cv2
import numpy as np
import numpy.typing as npt
from nvidia.dali import fn, types
from nvidia.dali import math as dali_math
from nvidia.dali.pipeline import Pipeline, pipeline_def

from inferline.imaging.decode import DecodeError, Geometry, Header, decode_probed, probe
from inferline.imaging.streaming import VideoReader
from inferline.imaging.upload import UploadStream
from inferline.imaging.video import (
    FrameChunk,
    Sampler,
    Sampling,
    VideoHeader,
    VideoLimits,
    probe_video,
)
from preprocess.backends import BackendSettings, Decoded, decode_in_parts
from preprocess.opencv import CpuVideoBackend

logger = logging.getLogger(__name__)

# What DALI's image decoder (nvImageCodec) reads; anything else (GIF) goes to the CPU core.
DALI_FORMATS = frozenset({"JPEG", "PNG", "WEBP", "BMP"})


def _resize_crop(frames: Any, geometry: Geometry, sequence: bool) -> Any:
    """HWC (or FHWC) -> CHW (or FCHW): shorter side to ``resize``, centre ``crop``."""
    shape = frames.shape(dtype=types.DALIDataType.FLOAT)
    height, width = (shape[1], shape[2]) if sequence else (shape[0], shape[1])
    side = dali_math.min(height, width) * (geometry.crop / geometry.resize)
    start = fn.stack((height - side) * 0.5, (width - side) * 0.5)
    out: Any = fn.resize(
        frames,
        size=(geometry.crop, geometry.crop),
        roi_start=start,
        roi_end=start + side,
        interp_type=types.DALIInterpType.INTERP_LINEAR,
        antialias=True,
    )
    return fn.transpose(out, perm=(0, 3, 1, 2) if sequence else (2, 0, 1))


@pipeline_def
def _image_graph(geometry: Geometry, device: str) -> Any:
    encoded = fn.external_source(
        name="encoded", dtype=types.DALIDataType.UINT8, ndim=1, no_copy=True
    )
    images = fn.decoders.image(encoded, device=device, output_type=types.DALIImageType.RGB)
    return _resize_crop(images, geometry, sequence=False)


@pipeline_def
def _video_graph(geometry: Geometry, device: str, sequence: int) -> Any:
    # Streams a video fed with feed_input("video", ...): each run decodes the next ``sequence``
    # frames (fewer at the end), so every frame is decoded once and a long video never has to
    # be decoded whole.
    video = fn.experimental.inputs.video(
        name="video", sequence_length=sequence, device=device, last_sequence_policy="partial"
    )
    return _resize_crop(video, geometry, sequence=True)


def image_pipeline(
    geometry: Geometry, *, gpu: bool, batch: int, threads: int, device_id: int = 0
) -> Pipeline:
    """A built image pipeline: ``mixed`` decoding on GPU ``device_id``, or all CPU."""
    pipe: Pipeline = _image_graph(
        geometry,
        "mixed" if gpu else "cpu",
        batch_size=batch,
        num_threads=threads,
        device_id=device_id if gpu else None,
        prefetch_queue_depth=1,
    )
    pipe.build()  # type: ignore[no-untyped-call]
    return pipe


def video_pipeline(
    geometry: Geometry, *, device: str, sequence: int, threads: int, device_id: int = 0
) -> Pipeline:
    """A built video pipeline: feed it one video, then each run gives its next frames."""
    pipe: Pipeline = _video_graph(
        geometry,
        device,
        sequence,
        batch_size=1,
        num_threads=threads,
        device_id=device_id if device == "mixed" else None,
        prefetch_queue_depth=1,
    )
    pipe.build()  # type: ignore[no-untyped-call]
    return pipe


class PipelinePool:
    """Idle pipelines; a pipeline that raised is replaced by a new one, never reused."""

    def __init__(self, build: Callable[[], Pipeline], size: int, sequence: int = 0) -> None:
        self._build = build
        self.sequence = sequence  # video pipelines: frames per run
        self._idle: queue.SimpleQueue[Pipeline] = queue.SimpleQueue()
        for _ in range(size):
            self._idle.put(build())
        self.size = size

    def run(self, **inputs: list[npt.NDArray[Any]]) -> npt.NDArray[np.uint8]:
        """Run one idle pipeline on ``inputs``; its single output as a host array (a copy)."""
        pipe = self.acquire()
        healthy = False
        try:
            output = run_once(pipe, **inputs)
            healthy = True
            return output
        finally:
            self.release(pipe, healthy)

    def acquire(self) -> Pipeline:
        """An idle pipeline, for as long as the caller needs it (waits for one)."""
        return self._idle.get()

    def release(self, pipe: Pipeline, healthy: bool) -> None:
        """Give ``pipe`` back; one that raised, or holds a stream's leftovers, is rebuilt."""
        self._idle.put(pipe if healthy else self._build())


def run_once(pipe: Pipeline, **inputs: list[npt.NDArray[Any]]) -> npt.NDArray[np.uint8]:
    """Run ``pipe``; its single output as a host array (a copy, safe after the next run)."""
    output: Any
    (output,) = pipe.run(**inputs)
    if hasattr(output, "as_cpu"):  # a GPU tensor list
        output = output.as_cpu()
    return np.asarray(output.as_array(), dtype=np.uint8)


def tiny_jpeg() -> bytes:
    """A 32x32 JPEG, to run each pipeline once at start-up (allocations, codec init)."""
    ok, data = cv2.imencode(".jpg", np.full((32, 32, 3), 128, np.uint8))
    assert ok
    return bytes(data)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if "pipeline" not in line.lower() and "File " not in line]
    return (useful or lines or [type(exc).__name__])[-1]


class DaliImageBackend:
    """Images through DALI: on the GPU one batch per request; on the CPU a request is split
    across single-threaded pipelines, one per worker, so that every core decodes."""

    def __init__(self, settings: BackendSettings, *, gpu: bool) -> None:
        self.name = "dali-gpu" if gpu else "dali-cpu"
        self.geometry, self.limits = settings.geometry, settings.limits
        pipelines = settings.gpu_pipelines if gpu else settings.workers
        threads = max(1, settings.workers // pipelines) if gpu else 1
        self._parts = 1 if gpu else pipelines
        build = functools.partial(
            image_pipeline,
            settings.geometry,
            gpu=gpu,
            batch=settings.max_batch,
            threads=threads,
            device_id=settings.device_id,
        )
        self.pool = PipelinePool(build, pipelines)
        self.executor = ThreadPoolExecutor(pipelines, thread_name_prefix=self.name)
        warm = [np.frombuffer(tiny_jpeg(), np.uint8)]
        for _ in range(pipelines):  # the pool is FIFO: this runs each pipeline once
            self.pool.run(encoded=warm)
        logger.info(
            "%s: %d pipeline(s) x %d thread(s), batches up to %d",
            self.name,
            pipelines,
            threads,
            settings.max_batch,
        )

    async def decode(
        self, images: Sequence[bytes], out: npt.NDArray[np.uint8] | None = None
    ) -> Decoded:
        return await decode_in_parts(
            images, self.geometry, self._parts, self.executor, self.decode_part, out
        )

    def decode_part(self, out: Decoded, images: Sequence[bytes], start: int, stop: int) -> None:
        """Decode ``images[start:stop]`` into ``out`` (blocking; on a worker thread)."""
        rows: dict[int, str] = {}  # row -> format, for DALI
        for i in range(start, stop):
            try:
                header = probe(images[i], self.limits)
                if self._fits(header):
                    rows[i] = header.format
                else:  # GIF (Pillow), or over the budget at full size (a reduced decode)
                    out.tensors[i] = decode_probed(images[i], header, self.geometry, self.limits)
            except DecodeError as exc:
                out.errors[i] = exc
        self._run_isolating(out, images, rows)

    def _fits(self, header: Header) -> bool:
        """DALI reads the format and can afford it at full size, the only size it decodes."""
        return header.format in DALI_FORMATS and header.pixels <= self.limits.max_pixels

    def _run_isolating(self, out: Decoded, images: Sequence[bytes], rows: dict[int, str]) -> None:
        if not rows:
            return
        index = list(rows)
        try:
            out.tensors[index] = self.pool.run(
                encoded=[np.frombuffer(images[i], np.uint8) for i in index]
            )
        except RuntimeError as exc:
            if len(index) == 1:
                logger.debug("%s cannot decode image: %s", self.name, exc)
                fmt = rows[index[0]]
                out.errors[index[0]] = DecodeError(
                    "corrupt", f"corrupt {fmt}: the decoder could not read it"
                )
                return
            logger.info(
                "%s: a batch of %d failed (%s); decoding it image by image",
                self.name,
                len(index),
                _first_line(exc),
            )
            for i in index:
                self._run_isolating(out, images, {i: rows[i]})

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


class DaliVideoReader:
    """Streams one video through a pipeline it holds until closed: each run decodes the next
    ``sequence`` frames and resizes them on the device; the sampler keeps what it wants.

    Timestamps are frame index / the container's frame rate (constant rate assumed; the CPU
    reader uses each frame's own timestamp)."""

    def __init__(
        self,
        pool: PipelinePool,
        data: bytes,
        header: VideoHeader,
        sampling: Sampling,
        limits: VideoLimits,
        backend: str,
    ) -> None:
        self.pool, self.header, self.limits, self.backend = pool, header, limits, backend
        self.sampler = Sampler(sampling)
        self.decoded = 0  # frames decoded so far
        self.ended = False  # the video ran out (a short sequence): the pipeline is clean
        self.pipe: Pipeline | None = pool.acquire()
        self.pipe.feed_input("video", [np.frombuffer(data, np.uint8)])  # type: ignore[no-untyped-call]

    def read_chunk(self) -> FrameChunk | None:
        while self.pipe is not None and not self.ended and not self.sampler.done:
            try:
                frames = run_once(self.pipe)[0]  # [k, 3, crop, crop]
            except RuntimeError as exc:
                if self.decoded == 0:
                    logger.debug("%s cannot decode video: %s", self.backend, exc)
                    raise DecodeError(
                        "corrupt", f"video could not be decoded ({_first_line(exc)})"
                    ) from None
                self._give_back(healthy=False)  # ran past the end: the pipeline is spent
                return None
            first, count = self.decoded, len(frames)
            self.decoded += count
            self.ended = count < self.pool.sequence
            self._check_progress()
            rate = self.header.fps
            keep = [i for i in range(count) if self.sampler.take(first + i, (first + i) / rate)]
            if keep:
                index = np.array([first + i for i in keep], dtype=np.int64)
                return FrameChunk(index, index / rate, np.ascontiguousarray(frames[keep]))
        return None

    def _check_progress(self) -> None:
        if self.decoded > self.limits.max_frames:
            raise DecodeError(
                "too_many_frames",
                f"video has more than {self.limits.max_frames} frames; the limit "
                f"(max_video_frames) is {self.limits.max_frames}",
            )
        if self.decoded / self.header.fps > self.limits.max_duration_s:
            raise DecodeError(
                "too_long",
                f"video runs past {self.limits.max_duration_s:g} s; the limit "
                f"(max_video_duration_s) is {self.limits.max_duration_s:g}",
            )

    def _give_back(self, healthy: bool) -> None:
        if self.pipe is not None:
            self.pool.release(self.pipe, healthy)
            self.pipe = None

    def close(self) -> None:
        # Reusable only if the video was read to its end; otherwise its leftover frames
        # would come out of the next video's runs.
        self._give_back(healthy=self.ended)


class DaliVideoBackend:
    """Video through DALI (``mixed``: NVDEC). Videos whose container states no frame rate
    fall back to the CPU reader, which reads each frame's timestamp."""

    def __init__(
        self, settings: BackendSettings, cpu: CpuVideoBackend, device: str = "mixed"
    ) -> None:
        self.name = "dali-gpu" if device == "mixed" else "dali-cpu"
        self.limits, self.cpu = settings.video_limits, cpu
        build = functools.partial(
            video_pipeline,
            settings.geometry,
            device=device,
            sequence=cpu.chunk,
            threads=max(1, settings.workers // settings.gpu_pipelines),
            device_id=settings.device_id,
        )
        self.pool = PipelinePool(build, settings.gpu_pipelines, sequence=cpu.chunk)

    def open(self, data: bytes, sampling: Sampling) -> VideoReader:
        header = probe_video(data, self.limits)
        if header.fps <= 0:
            logger.info("the container states no frame rate; decoding this video on the CPU")
            return self.cpu.open(data, sampling)
        return DaliVideoReader(self.pool, data, header, sampling, self.limits, self.name)

    def open_stream(self, upload: UploadStream, sampling: Sampling) -> VideoReader:
        # DALI's video input takes a whole file; a video still arriving is decoded on the CPU.
        return self.cpu.open_stream(upload, sampling)
