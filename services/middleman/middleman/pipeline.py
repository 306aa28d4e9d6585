"""The stages middleman calls: decoding (in process, or the preprocess service) and inference.

Each stage is a small async callable, so a deployment picks in-process or remote decoding, and
Triton, the batcher or Envoy for inference, by configuration alone. Decoded images travel as
:class:`Pixels`, the bytes the wire carries: what preprocess answers goes on to inference as
it came, with no numpy or protobuf conversion in between.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

import grpc
import numpy as np
import numpy.typing as npt
from prometheus_client import Counter
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferline import dial, kserve, preprocessing, retry, timing
from inferline.errors import InferError, from_upstream, invalid
from inferline.imaging.decode import DecodeError, Geometry, Limits, check_size, decode_image
from middleman.classifiers import Classifier

logger = logging.getLogger(__name__)

Request: TypeAlias = service_pb2.ModelInferRequest
Response: TypeAlias = service_pb2.ModelInferResponse

DECODE_ERRORS = Counter(
    "inferline_middleman_decode_errors_total", "Images refused by decoding, by kind", ["kind"]
)
RETRIES = Counter(
    "inferline_middleman_upstream_retries_total",
    "A hop dialled proxyless: requests retried on another replica (a replica went away), and "
    "retries its budget refused",
    ["upstream", "outcome"],
)


@dataclass(frozen=True)
class Pixels:
    """Decoded images as the wire carries them: uint8 ``[count, 3, crop, crop]``, C order."""

    data: bytes
    count: int
    crop: int

    @classmethod
    def of(cls, array: npt.NDArray[np.uint8]) -> Pixels:
        """From an array ``[count, 3, crop, crop]`` (one copy: its bytes)."""
        return cls(np.ascontiguousarray(array, np.uint8).tobytes(), array.shape[0], array.shape[-1])

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.count, 3, self.crop, self.crop)


class Preprocessor(Protocol):
    async def __call__(
        self, images: Sequence[bytes], geometry: Geometry, time_left: float
    ) -> Pixels: ...

    async def close(self) -> None: ...


class InProcessPreprocessor:
    """Decodes on a thread pool in this process (OpenCV releases the GIL)."""

    def __init__(self, limits: Limits, threads: int) -> None:
        self.limits = limits
        self.executor = ThreadPoolExecutor(threads, thread_name_prefix="decode")

    def _decode(self, index: int, data: bytes, geometry: Geometry) -> npt.NDArray[np.uint8]:
        try:
            return decode_image(data, geometry, self.limits)
        except DecodeError as exc:
            DECODE_ERRORS.labels(exc.kind).inc()
            raise invalid(f"image {index}: {exc}") from None

    async def __call__(
        self, images: Sequence[bytes], geometry: Geometry, time_left: float
    ) -> Pixels:
        loop = asyncio.get_running_loop()
        tensors = await asyncio.gather(
            *(
                loop.run_in_executor(self.executor, self._decode, i, d, geometry)
                for i, d in enumerate(images)
            )
        )
        return Pixels(b"".join(t.tobytes() for t in tensors), len(tensors), geometry.crop)

    async def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


class RemotePreprocessor:
    """Calls model ``preprocess`` of the preprocess service (or Envoy in front of several).

    Each request carries the model's geometry (parameters ``resize`` and ``crop``). Per-image
    refusals come back in its ``ERRORS`` output and are raised exactly as the in-process path
    raises them (INVALID_ARGUMENT, "image i: ..."). The byte limit is checked here too, so an
    over-sized image is refused before it crosses the network.
    """

    def __init__(self, url: str, limits: Limits) -> None:
        self.url, self.limits = url, limits
        self.channel = dial.channel(url)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.budget = dial.retry_budget(url)
        self._retried = retry_counter("preprocess")

    async def __call__(
        self, images: Sequence[bytes], geometry: Geometry, time_left: float
    ) -> Pixels:
        check_sizes(images, self.limits)
        request = images_request(preprocessing.MODEL, images, geometry)
        request.outputs.add(name=preprocessing.ERRORS)
        request.outputs.add(name=preprocessing.TENSOR)
        try:
            response = await retry.retried(
                self.budget, _attempt(self.stub.ModelInfer, request, time_left), self._retried
            )
        except grpc.aio.AioRpcError as exc:
            raise from_upstream(exc, f"preprocess at {self.url}") from None
        tensors = {t.name: (t, i) for i, t in enumerate(response.outputs)}
        if set(tensors) != {preprocessing.ERRORS, preprocessing.TENSOR}:
            raise InferError(
                grpc.StatusCode.INTERNAL, f"preprocess at {self.url} returned no TENSOR or ERRORS"
            )
        raise_refused(response, "remote")
        tensor, index = tensors[preprocessing.TENSOR]
        pixels = Pixels(response.raw_output_contents[index], len(images), geometry.crop)
        shape = list(tensor.shape)
        if tensor.datatype != "UINT8" or shape != list(pixels.shape):
            raise InferError(
                grpc.StatusCode.INTERNAL,
                f"preprocess at {self.url} returned {tensor.datatype} {shape}; expected "
                f"UINT8 {list(pixels.shape)}",
            )
        return pixels

    async def close(self) -> None:
        await self.channel.close()


class TritonUpstream:
    """KServe v2 models behind ``url``: Triton, the batcher, or Envoy in front of them.

    Calls the generated stub with raw tensor contents: no per-call conversion layer on the
    hot path (this process shares its cores with decoding).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.channel = dial.channel(url)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self.budget = dial.retry_budget(url)
        self._retried = retry_counter("inference")

    async def infer(
        self, model: Classifier, pixels: Pixels, time_left: float
    ) -> npt.NDArray[np.float32]:
        request = service_pb2.ModelInferRequest(model_name=model.model)
        request.inputs.add(name=model.input, datatype="UINT8", shape=pixels.shape)
        request.outputs.add(name=model.output)
        request.raw_input_contents.append(pixels.data)
        return await self._call(request, model, pixels.count, time_left)

    async def classify(
        self, model: Classifier, images: Sequence[bytes], time_left: float
    ) -> npt.NDArray[np.float32]:
        """The in-pod placement: ``images`` still encoded, to be decoded beside Triton (in the
        GPU pod, behind the batcher); a refused image fails the request as decoding here would."""
        request = images_request(model.model, images, model.geometry)
        request.outputs.add(name=model.output)
        request.outputs.add(name=preprocessing.ERRORS)
        return await self._call(request, model, len(images), time_left, errors=True)

    async def _call(
        self,
        request: service_pb2.ModelInferRequest,
        model: Classifier,
        count: int,
        time_left: float,
        errors: bool = False,
    ) -> npt.NDArray[np.float32]:
        try:
            response = await retry.retried(
                self.budget, _attempt(self.stub.ModelInfer, request, time_left), self._retried
            )
            if errors:
                raise_refused(response, "in-pod")
            output = kserve.output_array(response, model.output)
        except grpc.aio.AioRpcError as exc:
            raise from_upstream(exc, f"inference at {self.url}") from None
        except KeyError:
            output = None
        if output is None or output.shape[0] != count:
            raise InferError(
                grpc.StatusCode.INTERNAL,
                f"inference at {self.url} returned no {model.output!r} of {model.model!r} for "
                "the batch",
            )
        if output.shape[1:] != (len(model.labels),):
            raise InferError(
                grpc.StatusCode.INTERNAL,
                f"inference at {self.url}: {model.model!r} returned {list(output.shape)}, "
                f"expected [{count}, {len(model.labels)}] (one score per label)",
            )
        return np.asarray(output, dtype=np.float32)

    async def ready(self, models: Iterable[str], time_left: float = 2.0) -> bool:
        """Whether every one of ``models`` is ready behind ``url``."""

        async def one(name: str) -> bool:
            request = service_pb2.ModelReadyRequest(name=name)
            return bool((await self.stub.ModelReady(request, timeout=time_left)).ready)

        try:
            return all(await asyncio.gather(*map(one, models)))
        except grpc.aio.AioRpcError:
            return False

    async def close(self) -> None:
        await self.channel.close()


def retry_counter(upstream: str) -> retry.Count:
    return lambda outcome: RETRIES.labels(upstream, outcome).inc()


def _attempt(
    call: Callable[..., Any], request: Request, time_left: float
) -> Callable[[], Awaitable[Response]]:
    """One attempt of ``call`` within what is left of ``time_left`` (from now); what the hop
    below measured (its server timing) goes into this request's (:mod:`inferline.timing`)."""
    deadline = time.monotonic() + time_left

    async def attempt() -> Response:
        pending = call(request, timeout=max(0.0, deadline - time.monotonic()))
        response: Response = await pending
        if timing.active():
            timing.absorb(await pending.trailing_metadata())
        return response

    return attempt


def geometry_parameters(geometry: Geometry) -> dict[str, int]:
    """The request parameters that tell the preprocess service a model's geometry."""
    return {preprocessing.RESIZE: geometry.resize, preprocessing.CROP: geometry.crop}


def check_sizes(images: Sequence[bytes], limits: Limits) -> None:
    """The byte limit, before an image crosses the network to be decoded elsewhere."""
    for index, data in enumerate(images):
        try:
            check_size(data, limits)
        except DecodeError as exc:
            DECODE_ERRORS.labels(exc.kind).inc()
            raise invalid(f"image {index}: {exc}") from None


def images_request(
    model: str, images: Sequence[bytes], geometry: Geometry
) -> service_pb2.ModelInferRequest:
    """``IMAGE`` BYTES ``[N]`` for ``model``, with its geometry (:mod:`inferline.preprocessing`)."""
    request = service_pb2.ModelInferRequest(model_name=model)
    request.inputs.add(name=preprocessing.IMAGE, datatype="BYTES", shape=[len(images)])
    preprocessing.set_geometry(request, geometry.resize, geometry.crop)
    request.raw_input_contents.append(kserve.join_bytes(images))
    return request


def raise_refused(response: service_pb2.ModelInferResponse, where: str) -> None:
    """INVALID_ARGUMENT "image i: why" for the first image the decoder refused (``ERRORS``),
    exactly as decoding in this process says it."""
    try:
        messages = kserve.output_array(response, preprocessing.ERRORS).ravel()
    except KeyError:
        raise InferError(
            grpc.StatusCode.INTERNAL, f"the {where} decoder returned no ERRORS"
        ) from None
    refused = preprocessing.first_error(list(messages))
    if refused is not None:
        DECODE_ERRORS.labels(where).inc()
        raise invalid(f"image {refused[0]}: {refused[1]}")
