"""Model ``classifier_video``: a whole video in, one classified frame at a time out.

Frames come from the preprocess service's ``preprocess_video`` stream, or are decoded in this
process (the same core, :mod:`inferline.imaging.video`); each chunk of frames is one inference call,
and every frame becomes its own result as soon as its chunk is classified.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import grpc
import numpy as np
import tritonclient.grpc.aio as triton
from tritonclient.utils import InferenceServerException

from inferline.errors import InferError, from_upstream, invalid
from inferline.imaging.decode import DecodeError, Geometry
from inferline.imaging.streaming import read_chunks
from inferline.imaging.video import CpuVideoReader, FrameChunk, Sampling, VideoLimits
from inferline.server import channel_options
from middleman.budget import Budget
from middleman.classifiers import Classifier
from middleman.outputs import ClassifiedFrame
from middleman.pipeline import Pixels, TritonUpstream, geometry_parameters

logger = logging.getLogger(__name__)

# Request parameters that choose the sampling; forwarded to the preprocess service as they are.
SAMPLING_PARAMETERS = ("every_n", "fps", "max_frames")


class FrameSource(Protocol):
    def __call__(
        self, video: bytes, parameters: Mapping[str, object], time_left: float | None
    ) -> AsyncIterator[FrameChunk]: ...

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

    async def __call__(
        self, video: bytes, parameters: Mapping[str, object], time_left: float | None
    ) -> AsyncIterator[FrameChunk]:
        try:
            sampling = self.sampling.with_parameters(parameters, self.max_samples)
        except ValueError as exc:
            raise invalid(f"video sampling: {exc}") from None
        loop = asyncio.get_running_loop()

        def open_reader() -> CpuVideoReader:
            return CpuVideoReader(video, sampling, self.geometry, self.limits, self.chunk)

        try:
            reader = await loop.run_in_executor(self.executor, open_reader)
            async for chunk, _ in read_chunks(reader, self.executor):
                yield chunk
        except DecodeError as exc:
            raise invalid(f"video: {exc}") from None

    async def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


class RemoteFrames:
    """Streams ``preprocess_video`` from the preprocess service, at ``geometry``."""

    MODEL = "preprocess_video"

    def __init__(self, url: str, geometry: Geometry) -> None:
        self.url, self.geometry = url, geometry
        self.client = triton.InferenceServerClient(url, channel_args=channel_options())

    async def __call__(
        self, video: bytes, parameters: Mapping[str, object], time_left: float | None
    ) -> AsyncIterator[FrameChunk]:
        forwarded = {k: v for k, v in parameters.items() if k in SAMPLING_PARAMETERS}
        forwarded.update(geometry_parameters(self.geometry))

        async def requests() -> AsyncIterator[dict[str, object]]:
            tensor = triton.InferInput("VIDEO", [1], "BYTES")
            tensor.set_data_from_numpy(np.array([video], dtype=np.object_))
            yield {"model_name": self.MODEL, "inputs": [tensor], "parameters": forwarded}

        hop = f"preprocess at {self.url}"
        stream = self.client.stream_infer(requests(), stream_timeout=time_left)
        try:
            async for result, error in stream:
                if error is not None:
                    raise InferError(grpc.StatusCode.INTERNAL, f"{hop}: {error.message()}")
                chunk = self._chunk(result)
                if len(chunk):
                    yield chunk
                final = result.get_response().parameters.get("triton_final_response")
                if final is not None and final.bool_param:
                    return
        except (grpc.RpcError, InferenceServerException) as exc:
            raise from_upstream(exc, hop) from None
        finally:
            stream.cancel()

    def _chunk(self, result: triton.InferResult) -> FrameChunk:
        indices = result.as_numpy("FRAME_INDEX")
        stamps = result.as_numpy("TIMESTAMP")
        tensors = result.as_numpy("TENSOR")
        if indices is None or stamps is None or tensors is None:
            raise InferError(
                grpc.StatusCode.INTERNAL,
                f"preprocess at {self.url} sent a chunk without FRAME_INDEX, TIMESTAMP or TENSOR",
            )
        crop = self.geometry.crop
        if tensors.shape[1:] != (3, crop, crop):
            raise InferError(
                grpc.StatusCode.INTERNAL,
                f"preprocess at {self.url} sent frames of shape {list(tensors.shape[1:])}; "
                f"expected [3, {crop}, {crop}]",
            )
        return FrameChunk(
            np.asarray(indices, np.int64), np.asarray(stamps, np.float64), np.asarray(tensors)
        )

    async def close(self) -> None:
        await self.client.close()


class VideoClassifier:
    """Classifies each sampled frame with ``classifier`` (the default model)."""

    def __init__(
        self,
        frames: FrameSource,
        upstream: TritonUpstream,
        classifier: Classifier,
        timeout: float,
    ) -> None:
        self.frames, self.upstream, self.timeout = frames, upstream, timeout
        self.classifier = classifier

    async def __call__(
        self, video: bytes, parameters: Mapping[str, object], time_left: float | None
    ) -> AsyncIterator[ClassifiedFrame]:
        """Every sampled frame, classified, in order; the last one says so."""
        # A caller's deadline bounds the whole stream; without one, each chunk's inference gets
        # the default (a long video may take longer than any one default would allow).
        budget = None if time_left is None else Budget.start(time_left, self.timeout)
        held: ClassifiedFrame | None = None  # one frame back, to mark the last one
        async for chunk in self.frames(video, parameters, time_left):
            timeout = self.timeout if budget is None else budget.left("inference")
            pixels = Pixels.of(chunk.tensors)
            probabilities = await self.upstream.infer(self.classifier, pixels, timeout)
            for i in range(len(chunk)):
                if held is not None:
                    yield held
                held = ClassifiedFrame(
                    int(chunk.indices[i]), float(chunk.timestamps[i]), probabilities[i], False
                )
        if held is None:
            raise invalid("video: no frame was sampled")
        yield ClassifiedFrame(held.index, held.timestamp, held.probabilities, True)
