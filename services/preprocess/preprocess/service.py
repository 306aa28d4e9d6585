"""The thin gRPC layer: KServe v2 models ``preprocess`` (images) and ``preprocess_video`` (stream),
described in :mod:`preprocess.models`.

``preprocess``: a bad image's ``ERRORS`` element is the reason, its ``TENSOR`` row zeros.

``preprocess_video`` (``ModelStreamInfer``): responses of up to ``video_chunk_frames`` frames
each, then an empty response whose parameter ``triton_final_response`` is true (Triton's
decoupled-model convention). Request parameters ``every_n`` / ``fps`` / ``max_frames`` choose
the sampling. A refused video ends the stream with INVALID_ARGUMENT.

A video may also come in chunks, one request each, with the sequence parameters of
:mod:`inferline.sequence` (sampling, geometry and outputs on the first chunk): it is spooled to a
temporary file as it arrives and decoded while it does (on the CPU, whatever the backend), its
frames streamed back while later chunks are still arriving: each response holds what was
decoded since the last (up to ``video_chunk_frames``), so a frame leaves as soon as it is
decoded unless the stream is busy. When the spool is a window ahead of the decoder, the stream
is not read (flow control slows the sender). The spool is capped (``max_video_stream_bytes``);
frames and duration are limited as for a whole video.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
from tritonclient.grpc import service_pb2

from inferline import kserve, preprocessing, timing
from inferline.admission import Admission, Overloaded, Ticket
from inferline.described import VERSION
from inferline.errors import InferError, grpc_boundary, grpc_stream_boundary, invalid
from inferline.imaging.decode import DecodeError, Geometry
from inferline.imaging.streaming import read_as_decoded, read_chunks
from inferline.imaging.upload import Spool
from inferline.imaging.video import FrameChunk, Sampling
from inferline.preprocessing import MODEL, VIDEO_MODEL
from inferline.sequence import ChunkedVideo, chunked, spooled
from inferline.servicer import Context, KServeServicer
from preprocess import geometries, metrics
from preprocess.backends import Decoded, ImageBackend, VideoBackend
from preprocess.geometries import Decoders, TooManyGeometries
from preprocess.models import IMAGE_HINT, MODELS, VIDEO_HINT, describe

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceSettings:
    max_batch: int
    sampling: Sampling  # when a request names none
    max_samples: int  # the most a request's max_frames may ask for
    video_threads: int
    admission: Admission  # hard bounds only: requests and bytes decoding at once
    max_stream_bytes: int = 2 * 1024 * 1024 * 1024  # a video in chunks, spooled to disk
    video_chunk: int = 16  # frames a response, at most


class PreprocessService(KServeServicer):
    server_name = "inferline-preprocess"
    models = MODELS

    def __init__(self, decoders: Decoders, settings: ServiceSettings) -> None:
        self.decoders, self.settings = decoders, settings
        self.executor = ThreadPoolExecutor(settings.video_threads, thread_name_prefix="video")
        self.described = describe(decoders.default.crop, settings.max_batch)

    async def backends(
        self, request: service_pb2.ModelInferRequest
    ) -> tuple[Geometry, ImageBackend, VideoBackend]:
        """The geometry a request asks for, and the backends that decode to it."""
        try:
            geometry = geometries.requested(kserve.parameters(request), self.decoders.default)
            images, video = await self.decoders.get(geometry)
        except TooManyGeometries as exc:
            raise InferError(grpc.StatusCode.FAILED_PRECONDITION, str(exc)) from None
        except ValueError as exc:
            raise invalid(f"geometry: {exc}") from None
        return geometry, images, video

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    # -- health and metadata ------------------------------------------------------------------

    @grpc_boundary
    async def ModelMetadata(
        self, request: service_pb2.ModelMetadataRequest, context: Context
    ) -> service_pb2.ModelMetadataResponse:
        self.check_model(request.name, request.version)
        return self.described[request.name].metadata()

    @grpc_boundary
    async def ModelConfig(
        self, request: service_pb2.ModelConfigRequest, context: Context
    ) -> service_pb2.ModelConfigResponse:
        self.check_model(request.name, request.version)
        return service_pb2.ModelConfigResponse(config=self.described[request.name].config())

    # -- images -------------------------------------------------------------------------------

    @grpc_boundary
    async def ModelInfer(
        self, request: service_pb2.ModelInferRequest, context: Context
    ) -> service_pb2.ModelInferResponse:
        self.check_model(request.model_name, request.model_version)
        if request.model_name == VIDEO_MODEL:
            raise invalid(f"model {VIDEO_MODEL!r} streams its frames: call ModelStreamInfer")
        wanted = _requested(request, self.described[MODEL].output_names)
        items = kserve.find_batch(request, preprocessing.IMAGE, IMAGE_HINT, self.settings.max_batch)
        _, images, _ = await self.backends(request)
        with self._admitted(sum(map(len, items)), context, "image"):
            start = time.perf_counter()
            decoded = await images.decode(items)
        backend = images.name
        took = time.perf_counter() - start
        metrics.DECODE_SECONDS.labels(backend, "image").observe(took)
        timing.record("decode", took)

        response = service_pb2.ModelInferResponse(
            model_name=MODEL, model_version=VERSION, id=request.id
        )
        outputs: dict[str, npt.NDArray[Any]] = {
            preprocessing.TENSOR: decoded.tensors,
            preprocessing.ERRORS: np.array(decoded.messages(), dtype=np.object_),
        }
        for name in wanted:
            kserve.add_output(response, name, outputs[name])
        count_images(backend, items, decoded)
        metrics.BYTES_OUT.labels(backend, "image").inc(decoded.tensors.nbytes)
        return response

    @contextlib.contextmanager
    def _admitted(self, nbytes: int, context: Context, media: str) -> Iterator[Ticket]:
        """Within the bounds on what decodes at once, and only while the caller still waits."""
        admission = self.settings.admission
        try:
            ticket = admission.admit(0, nbytes, 0.0)
        except Overloaded as exc:
            metrics.REFUSED.labels(exc.reason).inc()
            raise InferError(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc)) from None
        try:
            remaining = context.time_remaining()
            if remaining is not None and remaining <= 0:
                metrics.EXPIRED.labels(media).inc()
                raise InferError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    "the deadline had passed before decoding began; nothing was decoded",
                )
            yield ticket
        finally:
            admission.release(ticket, True)

    # -- video --------------------------------------------------------------------------------

    @grpc_stream_boundary
    async def ModelStreamInfer(
        self, requests: AsyncIterator[service_pb2.ModelInferRequest], context: Context
    ) -> AsyncIterator[service_pb2.ModelStreamInferResponse]:
        stream = aiter(requests)  # read here and, for a video in chunks, by its spool
        answering = False  # response headers sent
        async for request in stream:
            video = chunked(request, stream, self._video_bytes)
            if video is None:
                responses = self._video(request, context)
            else:
                responses = self._video_upload(request, video, context)
                if not answering:
                    # Headers now: a proxy in front (Envoy) keeps a request's body to retry it
                    # until the response begins; a video in chunks cannot be retried.
                    await context.send_initial_metadata(())
                    answering = True
            async for response in responses:
                answering = True
                yield service_pb2.ModelStreamInferResponse(infer_response=response)

    def _video_bytes(self, request: service_pb2.ModelInferRequest) -> bytes:
        """The one element of a ``preprocess_video`` request's ``VIDEO``: a video, or a chunk."""
        self.check_model(request.model_name, request.model_version)
        if request.model_name != VIDEO_MODEL:
            raise invalid(f"model {request.model_name!r} is not streamed: call ModelInfer")
        video = kserve.find_input(request, preprocessing.VIDEO, "BYTES", VIDEO_HINT)
        if video.shape != (1,):
            raise invalid(
                f"input {preprocessing.VIDEO!r} must have shape [1]; got {list(video.shape)}"
            )
        return bytes(video[0])

    def _sampling(self, request: service_pb2.ModelInferRequest) -> Sampling:
        try:
            return self.settings.sampling.with_parameters(
                kserve.parameters(request), self.settings.max_samples
            )
        except ValueError as exc:
            raise invalid(f"video sampling: {exc}") from None

    async def _video(
        self, request: service_pb2.ModelInferRequest, context: Context
    ) -> AsyncIterator[service_pb2.ModelInferResponse]:
        data = self._video_bytes(request)
        wanted = _requested(request, self.described[VIDEO_MODEL].output_names)
        sampling = self._sampling(request)
        geometry, _, backends = await self.backends(request)
        loop = asyncio.get_running_loop()
        backend = backends.name
        with self._admitted(len(data), context, "video"):
            try:
                reader = await loop.run_in_executor(self.executor, backends.open, data, sampling)
                backend = reader.backend
                metrics.BYTES_IN.labels(backend, "video").inc(len(data))
                logger.debug("video %r: %s, sampling %s", request.id, reader.header, sampling)
                decoded = read_chunks(reader, self.executor)
                async for chunk in self._responses(request, decoded, wanted, backend):
                    yield chunk
            except DecodeError as exc:
                raise _refused(exc, backend) from None
        yield self._chunk_response(request, self._no_frames(geometry.crop), wanted, final=True)

    async def _video_upload(
        self, first: service_pb2.ModelInferRequest, video: ChunkedVideo, context: Context
    ) -> AsyncIterator[service_pb2.ModelInferResponse]:
        """A video in chunks: spooled as it arrives, decoded while it does."""
        wanted = _requested(first, self.described[VIDEO_MODEL].output_names)
        sampling = self._sampling(first)
        geometry, _, backends = await self.backends(first)
        backend = "opencv"  # whatever the image backend: DALI takes whole files only
        loop = asyncio.get_running_loop()
        spool: Spool | None = None
        try:
            async with spooled(video, self.settings.max_stream_bytes) as spool:
                with self._admitted(0, context, "video"):
                    reader = await loop.run_in_executor(
                        spool.executor, backends.open_stream, spool.stream, sampling
                    )
                    logger.debug("video %r in chunks: %s, %s", video.id, reader.header, sampling)
                    limit = self.settings.video_chunk
                    decoded = read_as_decoded(reader, spool.executor, limit)
                    async for chunk in self._responses(first, decoded, wanted, backend):
                        yield chunk
                spool.stream.release()  # decoded: what still arrives is read and dropped
                crop = geometry.crop
                yield self._chunk_response(first, self._no_frames(crop), wanted, final=True)
        except DecodeError as exc:
            raise _refused(exc, backend) from None
        finally:
            if spool is not None:
                metrics.BYTES_IN.labels(backend, "video").inc(spool.stream.written)

    async def _responses(
        self,
        request: service_pb2.ModelInferRequest,
        decoded: AsyncGenerator[tuple[FrameChunk, float], None],
        wanted: list[str],
        backend: str,
    ) -> AsyncIterator[service_pb2.ModelInferResponse]:
        """A response for each chunk of sampled frames, as each is decoded."""
        async with contextlib.aclosing(counted(decoded, backend)) as chunks:
            async for chunk in chunks:
                metrics.BYTES_OUT.labels(backend, "video").inc(chunk.tensors.nbytes)
                yield self._chunk_response(request, chunk, wanted, final=False)

    @staticmethod
    def _no_frames(crop: int) -> FrameChunk:
        return FrameChunk(
            np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros((0, 3, crop, crop), np.uint8)
        )

    @staticmethod
    def _chunk_response(
        request: service_pb2.ModelInferRequest,
        chunk: FrameChunk,
        wanted: Iterable[str],
        final: bool,
    ) -> service_pb2.ModelInferResponse:
        response = service_pb2.ModelInferResponse(
            model_name=VIDEO_MODEL, model_version=VERSION, id=request.id
        )
        outputs: dict[str, npt.NDArray[Any]] = {
            preprocessing.TENSOR: chunk.tensors,
            preprocessing.FRAME_INDEX: chunk.indices,
            preprocessing.TIMESTAMP: chunk.timestamps,
        }
        for name in wanted:
            kserve.add_output(response, name, outputs[name])
        response.parameters[preprocessing.FINAL_RESPONSE].bool_param = final
        return response


def count_images(backend: str, items: list[bytes], decoded: Decoded) -> None:
    """A batch decoded: its images, refusals by kind, and encoded bytes counted."""
    failed = [e for e in decoded.errors if e is not None]
    for error in failed:
        metrics.ERRORS.labels(backend, "image", error.kind).inc()
    metrics.IMAGES.labels(backend).inc(len(items) - len(failed))
    metrics.BYTES_IN.labels(backend, "image").inc(sum(map(len, items)))


async def counted(
    decoded: AsyncGenerator[tuple[FrameChunk, float], None], backend: str
) -> AsyncGenerator[FrameChunk, None]:
    """``decoded``'s chunks, their decoding time and frames counted; stops decoding when the
    caller does."""
    async with contextlib.aclosing(decoded):
        async for chunk, seconds in decoded:
            metrics.DECODE_SECONDS.labels(backend, "video").observe(seconds)
            metrics.FRAMES.labels(backend).inc(len(chunk))
            yield chunk


def _refused(exc: DecodeError, backend: str) -> InferError:
    """A refused video: counted by its kind, INVALID_ARGUMENT saying why."""
    metrics.ERRORS.labels(backend, "video", exc.kind).inc()
    return invalid(f"video: {exc}")


def _requested(request: service_pb2.ModelInferRequest, names: tuple[str, ...]) -> list[str]:
    """The outputs a request asks for, in its order; all of ``names`` when it names none."""
    if not request.outputs:
        return list(names)
    wanted = []
    for output in request.outputs:
        if output.name not in names:
            raise invalid(
                f"unknown output {output.name!r}: model {request.model_name!r} has "
                f"{', '.join(repr(n) for n in names)}"
            )
        wanted.append(output.name)
    return wanted
