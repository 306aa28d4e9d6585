"""Frames decoded elsewhere, over one ``preprocess_video`` stream: at the preprocess service
(:class:`RemoteFrames`), or decoded and classified in a GPU pod (:class:`PodFrames`).

A video in chunks is forwarded over that stream as its chunks arrive (at most
:data:`FORWARD_WINDOW_CHUNKS` waiting here), while the stream's frames come back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Mapping
from typing import TypeAlias, TypeGuard, TypeVar

import grpc
import numpy as np
import numpy.typing as npt
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferline import dial, kserve, preprocessing
from inferline.errors import InferError, from_upstream
from inferline.imaging.decode import Geometry
from inferline.sequence import SIZE_PARAMETER, Chunk, ChunkedVideo, IncompleteSequence
from inferline.tensors import join_bytes
from middleman.classifiers import Classifier
from middleman.frames import Chunks, PixelChunk, ScoredChunk, Video
from middleman.pipeline import Pixels, geometry_parameters

T = TypeVar("T")

# Request parameters that choose the sampling; forwarded to the preprocess service as they are.
SAMPLING_PARAMETERS = ("every_n", "fps", "max_frames")
# Chunks of a video waiting here to be forwarded to the preprocess service, at most.
FORWARD_WINDOW_CHUNKS = 2

Parameters: TypeAlias = dict[str, bool | int | float | str]
Request: TypeAlias = service_pb2.ModelInferRequest
StreamCall: TypeAlias = grpc.aio.StreamStreamCall[Request, service_pb2.ModelStreamInferResponse]


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
