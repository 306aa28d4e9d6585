"""Model ``classifier_video``: a video in, one classified frame at a time out.

A video is a whole file (one request) or a file in chunks (:mod:`inferline.sequence`), classified
while its chunks are still arriving. Frames come from the preprocess service's
``preprocess_video`` stream, or are decoded in this process (the same core,
:mod:`inferline.imaging.video`); each chunk of frames is one inference call, and every frame
becomes its own result as soon as its chunk is classified.

A video in chunks, decoded here, is spooled to a temporary file as it arrives
(:class:`~inferline.imaging.upload.UploadStream`); decoded at the preprocess service, its chunks
are forwarded over one ``preprocess_video`` stream as they arrive (at most
:data:`FORWARD_WINDOW_CHUNKS` waiting here), while that stream's frames come back. Either way,
when the decoder is behind, the client's stream is not read, and gRPC's flow control slows the
sender: memory holds a few chunks, whatever the video's size.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, TypeAlias, TypeGuard, TypeVar

import grpc
import numpy as np
import numpy.typing as npt
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferline import dial, kserve, preprocessing
from inferline.errors import InferError, from_upstream, invalid
from inferline.imaging.decode import DecodeError, Geometry
from inferline.imaging.streaming import VideoReader, read_as_decoded, read_chunks
from inferline.imaging.upload import UploadStream
from inferline.imaging.video import CpuVideoReader, FrameChunk, Sampling, VideoLimits
from inferline.sequence import (
    SIZE_PARAMETER,
    Chunk,
    ChunkedVideo,
    IncompleteSequence,
    spooled,
)
from inferline.tensors import join_bytes
from middleman.budget import Budget
from middleman.classifiers import Classifier
from middleman.outputs import ClassifiedFrame
from middleman.pipeline import Pixels, TritonUpstream, geometry_parameters

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Request parameters that choose the sampling; forwarded to the preprocess service as they are.
SAMPLING_PARAMETERS = ("every_n", "fps", "max_frames")
# Chunks of a video waiting here to be forwarded to the preprocess service, at most.
FORWARD_WINDOW_CHUNKS = 2

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
Parameters: TypeAlias = dict[str, bool | int | float | str]
Request: TypeAlias = service_pb2.ModelInferRequest
StreamCall: TypeAlias = grpc.aio.StreamStreamCall[Request, service_pb2.ModelStreamInferResponse]


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


class RemoteFrames:
    """Streams ``preprocess_video`` from the preprocess service, at ``geometry``, with the
    generated stub as images are sent: each chunk's frames stay the bytes the wire carried
    (:class:`PixelChunk`) on their way to inference."""

    def __init__(self, url: str, geometry: Geometry) -> None:
        self.url, self.geometry = url, geometry
        self.channel = dial.channel(url)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    @contextlib.asynccontextmanager
    async def __call__(
        self, video: Video, parameters: Mapping[str, object], time_left: float | None
    ) -> AsyncIterator[AsyncIterator[Chunks]]:
        forwarded = self._parameters(parameters)
        if isinstance(video, bytes):
            forwarding = None
            requests: AsyncIterator[Request] = _one(video_request(video, forwarded))
        else:
            forwarding = _Forwarding(video, forwarded)
            requests = forwarding.requests()
        call = self.stub.ModelStreamInfer(requests, timeout=time_left)
        frames = self._frames(call, forwarding)
        try:
            yield frames
            if forwarding is not None:
                await forwarding.drain()  # the client's rest, read and dropped
        finally:
            await frames.aclose()
            call.cancel()
            if forwarding is not None:
                forwarding.cancel()

    def _parameters(self, parameters: Mapping[str, object]) -> Parameters:
        """What the stream's first request tells the decoder: sampling and geometry."""
        forwarded: Parameters = {
            k: v for k, v in parameters.items() if k in SAMPLING_PARAMETERS and is_parameter(v)
        }
        return {**forwarded, **geometry_parameters(self.geometry)}

    async def _frames(
        self, call: StreamCall, forwarding: _Forwarding | None
    ) -> AsyncGenerator[Chunks, None]:
        """The chunks of frames the stream sends, up to its final response. A failure of the
        forwarding (the client broke the protocol) ends them with that failure."""
        hop = f"preprocess at {self.url}"
        try:
            while True:
                if forwarding is None:
                    response = await call.read()
                else:
                    response = await forwarding.unless_failed(call.read())
                if response is grpc.aio.EOF:
                    raise InferError(
                        grpc.StatusCode.INTERNAL, f"{hop} ended the stream without a final response"
                    )
                if response.error_message:
                    raise InferError(grpc.StatusCode.INTERNAL, f"{hop}: {response.error_message}")
                result = response.infer_response
                chunk = self._chunk(result)
                if len(chunk):
                    yield chunk
                final = result.parameters.get(preprocessing.FINAL_RESPONSE)
                if final is not None and final.bool_param:
                    return
        except grpc.aio.AioRpcError as exc:
            raise from_upstream(exc, hop) from None

    def _chunk(self, response: service_pb2.ModelInferResponse) -> Chunks:
        """FRAME_INDEX, TIMESTAMP and the frames (TENSOR UINT8 ``[k, 3, crop, crop]``)."""
        indices, stamps = _positions(response, f"preprocess at {self.url}")
        crop, count = self.geometry.crop, len(indices)
        tensor = _output(response, preprocessing.TENSOR)
        expected = [count, 3, crop, crop]
        if tensor is None or tensor[0].datatype != "UINT8" or list(tensor[0].shape) != expected:
            got = "no TENSOR" if tensor is None else f"{tensor[0].datatype} {list(tensor[0].shape)}"
            raise InferError(
                grpc.StatusCode.INTERNAL,
                f"preprocess at {self.url} sent {got} for {count} frames; expected UINT8 "
                f"{expected}",
            )
        pixels = Pixels(tensor[1], count, crop)
        if len(pixels.data) != count * 3 * crop * crop:
            raise InferError(
                grpc.StatusCode.INTERNAL,
                f"preprocess at {self.url} sent {len(pixels.data)} bytes of TENSOR {expected}",
            )
        return PixelChunk(indices, stamps, pixels)

    async def close(self) -> None:
        await self.channel.close()


def video_request(
    data: bytes, parameters: Parameters, sequence: Parameters | None = None
) -> Request:
    """``preprocess_video``'s request: ``VIDEO`` BYTES [1] (a whole file, or the next chunk), the
    first request's ``parameters``, and a chunk's ``sequence`` parameters."""
    request = Request(model_name=preprocessing.VIDEO_MODEL)
    request.inputs.add(name=preprocessing.VIDEO, datatype="BYTES", shape=[1])
    request.raw_input_contents.append(join_bytes([data]))
    kserve.set_parameters(request.parameters, {**parameters, **(sequence or {})})
    return request


async def _one(request: Request) -> AsyncIterator[Request]:
    yield request


def is_parameter(value: object) -> TypeGuard[bool | int | float | str]:
    return isinstance(value, bool | int | float | str)


def _output(
    response: service_pb2.ModelInferResponse, name: str
) -> tuple[service_pb2.ModelInferResponse.InferOutputTensor, bytes] | None:
    """Output ``name`` and its raw contents, or None."""
    for index, tensor in enumerate(response.outputs):
        if tensor.name == name and index < len(response.raw_output_contents):
            return tensor, response.raw_output_contents[index]
    return None


def _positions(
    response: service_pb2.ModelInferResponse, hop: str
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """A chunk's FRAME_INDEX (INT64 [k]) and TIMESTAMP (FP64 [k])."""
    try:
        indices = kserve.output_array(response, preprocessing.FRAME_INDEX)
        stamps = kserve.output_array(response, preprocessing.TIMESTAMP)
        fits = indices.dtype == np.dtype(np.int64) and stamps.dtype == np.dtype(np.float64)
        fits = fits and indices.ndim == 1 and indices.shape == stamps.shape
    except (KeyError, IndexError, ValueError, TypeError):
        fits = False
    if not fits:
        raise InferError(
            grpc.StatusCode.INTERNAL,
            f"{hop} sent a chunk without FRAME_INDEX (INT64 [k]) and TIMESTAMP (FP64 [k])",
        )
    return indices.astype(np.int64, copy=False), stamps.astype(np.float64, copy=False)


class _Forwarding:
    """A video's chunks forwarded as ``preprocess_video``'s requests, each as it arrives, with
    the same sequence parameters: a task reads the client's chunks (checking the protocol) into
    a queue of :data:`FORWARD_WINDOW_CHUNKS`, which the upstream stream's requests are taken
    from."""

    def __init__(self, video: ChunkedVideo, parameters: Parameters) -> None:
        self.video, self.parameters = video, dict(parameters)
        if video.size is not None:
            self.parameters[SIZE_PARAMETER] = video.size
        self.queue: asyncio.Queue[Request | None] = asyncio.Queue(FORWARD_WINDOW_CHUNKS)
        self.dropping = False  # the decoder is done: chunks are read and dropped
        self.task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        first = True
        async for chunk in self.video.chunks:
            if not self.dropping:
                await self.queue.put(self._request(chunk, first))
            first = False
        if not self.dropping:
            await self.queue.put(None)

    def _request(self, chunk: Chunk, first: bool) -> Request:
        sequence: Parameters = {
            "sequence_id": self.video.id,
            "sequence_start": first,
            "sequence_end": chunk.last,
        }
        return video_request(chunk.data, self.parameters if first else {}, sequence)

    async def requests(self) -> AsyncIterator[Request]:
        while (request := await self.queue.get()) is not None:
            yield request

    async def unless_failed(self, response: Awaitable[T]) -> T:
        """Await ``response`` (the next from upstream), unless the forwarding fails first:
        then its failure is raised (what the client did wrong, not what upstream saw of it)."""
        waiting = asyncio.ensure_future(response)
        try:
            if not self.task.done():
                await asyncio.wait({waiting, self.task}, return_when=asyncio.FIRST_COMPLETED)
            if not waiting.done():
                self._raise_failure()  # the task ended first: failed, or sent the last chunk
        except BaseException:
            waiting.cancel()
            raise
        return await waiting

    def _raise_failure(self) -> None:
        if self.task.done() and not self.task.cancelled():
            error = self.task.exception()
            if error is not None:
                raise error

    async def drain(self) -> None:
        """The decoder is done: end the upstream stream, and read the client's remaining
        chunks (checking the protocol) and drop them. A client that ends its stream before
        sequence_end is fine now: nothing more was needed."""
        self.dropping = True
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(None)
        with contextlib.suppress(IncompleteSequence):
            await self.task

    def cancel(self) -> None:
        if not self.task.done():
            self.task.cancel()
        elif not self.task.cancelled():
            self.task.exception()  # raised already, or drained: retrieved here


class PodFrames(RemoteFrames):
    """The in-pod placement: the video goes (through the batcher) to a GPU pod, whose
    preprocess decodes and classifies its frames there (``infer_model``), so each chunk comes
    back as the model's scores, one row per frame, and no frame crosses the network."""

    def __init__(self, url: str, classifier: Classifier) -> None:
        super().__init__(url, classifier.geometry)
        self.classifier = classifier

    def _parameters(self, parameters: Mapping[str, object]) -> Parameters:
        return {**super()._parameters(parameters), preprocessing.INFER_MODEL: self.classifier.model}

    def _chunk(self, response: service_pb2.ModelInferResponse) -> ScoredChunk:
        """FRAME_INDEX, TIMESTAMP and the frames' scores ``[k, classes]``."""
        hop = f"the GPU pod at {self.url}"
        indices, stamps = _positions(response, hop)
        classes = len(self.classifier.labels)
        if len(indices) == 0:  # the final response
            return ScoredChunk(indices, stamps, np.zeros((0, classes), np.float32))
        try:
            scores = kserve.output_array(response, self.classifier.output)
        except (KeyError, IndexError, ValueError, TypeError):
            scores = None
        if scores is None or scores.shape != (len(indices), classes):
            raise InferError(
                grpc.StatusCode.INTERNAL,
                f"{hop} sent no {self.classifier.output!r} [{len(indices)}, {classes}] for its "
                "frames",
            )
        return ScoredChunk(indices, stamps, np.asarray(scores, np.float32))


class VideoClassifier:
    """Classifies each sampled frame with ``classifier`` (the default model); frames that come
    classified already (:class:`PodFrames`) are not sent for inference again."""

    def __init__(
        self,
        frames: FrameSource,
        upstream: TritonUpstream,
        classifier: Classifier,
        timeout: float,
    ) -> None:
        self.frames, self.upstream, self.timeout = frames, upstream, timeout
        self.classifier = classifier

    @contextlib.asynccontextmanager
    async def __call__(
        self, video: Video, parameters: Mapping[str, object], time_left: float | None
    ) -> AsyncIterator[AsyncIterator[ClassifiedFrame]]:
        """Every sampled frame, classified, in order, while the context is open; the last one
        says so. A video in chunks is read to its end when the context closes."""
        async with self.frames(video, parameters, time_left) as chunks:
            classified = self._classified(chunks, time_left)
            try:
                yield classified
            finally:
                await classified.aclose()

    async def _classified(
        self, chunks: AsyncIterator[Chunks], time_left: float | None
    ) -> AsyncGenerator[ClassifiedFrame, None]:
        # A caller's deadline bounds the whole stream; without one, each chunk's inference gets
        # the default (a long video may take longer than any one default would allow).
        budget = None if time_left is None else Budget.start(time_left, self.timeout)
        held: ClassifiedFrame | None = None  # one frame back, to mark the last one
        async for chunk in chunks:
            timeout = self.timeout if budget is None else budget.left("inference")
            if isinstance(chunk, ScoredChunk):
                probabilities = chunk.scores
            else:
                pixels = chunk.pixels if isinstance(chunk, PixelChunk) else Pixels.of(chunk.tensors)
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
