"""The in-pod placement: preprocess beside Triton, the GPU pod's front door.

Envoy (or the batcher) sends the pod batches of *encoded* images for Triton's models: ``IMAGE``
BYTES ``[N]`` with the model's geometry (:mod:`inferline.preprocessing`). The pod decodes the
batch straight into a slot of its shared-memory ring (:mod:`preprocess.shm`), calls its own
Triton with the input in that region (:mod:`preprocess.local_triton`), and answers the model's
outputs plus ``ERRORS`` ``[N]``: a bad image gets its message there and a zero row, so its
batch-mates are classified all the same. Decoded pixels never leave the pod.

A request that carries the model's own tensors instead (frames decoded elsewhere) goes to Triton
as it is. Readiness, metadata and configuration of Triton's models are Triton's own, passed
through; the pod's own models (``preprocess``, ``preprocess_video``) stay served as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator

import grpc
from tritonclient.grpc import service_pb2

from inferline import kserve, preprocessing, timing, tracing
from inferline.described import VERSION
from inferline.errors import InferError, from_upstream, grpc_boundary
from inferline.imaging.video import FrameChunk
from inferline.server import RunningServer
from inferline.servicer import Context
from preprocess import metrics
from preprocess.geometries import Decoders
from preprocess.local_triton import LocalTriton, ModelSpec
from preprocess.models import IMAGE_HINT, MODELS
from preprocess.service import PreprocessService, ServiceSettings, count_images, counted
from preprocess.shm import NoSlot

logger = logging.getLogger(__name__)

HEALTH_PERIOD_S = 1.0
# While its Triton is not ready (starting, restarting), the pod asks this often: Envoy's next
# health check, a second later, would otherwise find the pod NOT_SERVING after its Triton is up.
STARTING_PERIOD_S = 0.1


class PodService(PreprocessService):
    server_name = "inferline-preprocess-pod"

    def __init__(self, decoders: Decoders, settings: ServiceSettings, triton: LocalTriton) -> None:
        super().__init__(decoders, settings)
        self.triton = triton

    async def ready(self) -> bool:
        return await self.triton.ready()

    def check_model(self, name: str, version: str) -> None:
        if name in MODELS:
            super().check_model(name, version)
        # Anything else is Triton's to answer (NOT_FOUND names what it serves).

    # -- Triton's models: passed through --------------------------------------------------------

    async def ModelReady(
        self, request: service_pb2.ModelReadyRequest, context: Context
    ) -> service_pb2.ModelReadyResponse:
        if request.name in MODELS:
            return await super().ModelReady(request, context)
        try:
            response = await self.triton.stub.ModelReady(request, timeout=context.time_remaining())
        except grpc.aio.AioRpcError:
            return service_pb2.ModelReadyResponse(ready=False)
        return response

    @grpc_boundary
    async def ModelMetadata(
        self, request: service_pb2.ModelMetadataRequest, context: Context
    ) -> service_pb2.ModelMetadataResponse:
        if request.name in MODELS:
            return await super().ModelMetadata(request, context)
        return await self._triton_call("ModelMetadata", request, context)

    @grpc_boundary
    async def ModelConfig(
        self, request: service_pb2.ModelConfigRequest, context: Context
    ) -> service_pb2.ModelConfigResponse:
        if request.name in MODELS:
            return await super().ModelConfig(request, context)
        return await self._triton_call("ModelConfig", request, context)

    async def _triton_call(self, method: str, request: object, context: Context) -> object:
        try:
            return await getattr(self.triton.stub, method)(
                request, timeout=context.time_remaining()
            )
        except grpc.aio.AioRpcError as exc:
            raise from_upstream(exc, f"Triton at {self.triton.url}") from None

    # -- inference ------------------------------------------------------------------------------

    @grpc_boundary
    async def ModelInfer(
        self, request: service_pb2.ModelInferRequest, context: Context
    ) -> service_pb2.ModelInferResponse:
        if request.model_name in MODELS:
            return await super().ModelInfer(request, context)
        if not any(t.name == preprocessing.IMAGE for t in request.inputs):
            return await self._triton_call("ModelInfer", request, context)  # tensors already
        return await self.classify(request, context.time_remaining(), context)

    async def classify(
        self, request: service_pb2.ModelInferRequest, time_left: float | None, context: Context
    ) -> service_pb2.ModelInferResponse:
        """Decode ``IMAGE`` into a shared-memory slot, infer there, answer with ``ERRORS``."""
        model, version = request.model_name, request.model_version
        spec = await self.triton.spec(model, version, time_left)
        items = kserve.find_batch(request, preprocessing.IMAGE, IMAGE_HINT, spec.max_batch)
        geometry, images, _ = await self.backends(request)
        if (geometry.crop, geometry.crop) != (spec.height, spec.width):
            raise InferError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"crop {geometry.crop} does not fit model {model!r}, whose input "
                f"{spec.input!r} is [N, 3, {spec.height}, {spec.width}]",
            )
        shape = (len(items), 3, geometry.crop, geometry.crop)
        wanted = [o for o in request.outputs if o.name != preprocessing.ERRORS]
        errors_wanted = not request.outputs or len(wanted) < len(request.outputs)
        with self._admitted(sum(map(len, items)), context, "image"):
            try:
                async with self.triton.ring.slot(time_left) as slot:
                    start = time.perf_counter()
                    step = {"inferline.images": len(items), "inferline.backend": images.name}
                    with tracing.step("decode", step):
                        decoded = await images.decode(items, out=slot.view(shape))
                    took = time.perf_counter() - start
                    metrics.DECODE_SECONDS.labels(images.name, "image").observe(took)
                    timing.record("decode", took)
                    upstream = service_pb2.ModelInferRequest(
                        model_name=model, model_version=version, id=request.id
                    )
                    tensor = upstream.inputs.add(name=spec.input, datatype="UINT8", shape=shape)
                    tensor.parameters["shared_memory_region"].string_param = slot.name
                    tensor.parameters[
                        "shared_memory_byte_size"
                    ].int64_param = decoded.tensors.nbytes
                    upstream.outputs.extend(wanted)
                    left = (
                        None
                        if time_left is None
                        else max(0.0, time_left - (time.perf_counter() - start))
                    )
                    inferring = time.perf_counter()
                    with tracing.step("infer", {"inferline.model": model}):
                        response = await self.triton.infer(upstream, slot, left)
                    timing.record("infer", time.perf_counter() - inferring)
            except NoSlot as exc:
                metrics.REFUSED.labels("shared_memory").inc()
                raise InferError(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{exc} (load)") from None
        count_images(images.name, items, decoded)
        metrics.SHM_BYTES.inc(decoded.tensors.nbytes)
        if errors_wanted:
            tensor = response.outputs.add(
                name=preprocessing.ERRORS, datatype="BYTES", shape=[len(items)]
            )
            response.raw_output_contents.append(kserve.join_bytes(decoded.messages()))
        return response

    # -- video: frames inferred in the pod -----------------------------------------------------

    async def _responses(
        self,
        request: service_pb2.ModelInferRequest,
        decoded: AsyncGenerator[tuple[FrameChunk, float], None],
        wanted: list[str],
        backend: str,
    ) -> AsyncIterator[service_pb2.ModelInferResponse]:
        """``preprocess_video`` with ``infer_model``: each chunk of frames goes to that model
        through shared memory, and its outputs go back instead of the frames."""
        model = kserve.parameters(request).get(preprocessing.INFER_MODEL)
        if not model:
            async for response in super()._responses(request, decoded, wanted, backend):
                yield response
            return
        if not isinstance(model, str):
            raise InferError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{preprocessing.INFER_MODEL!r} must be a model name",
            )
        spec = await self.triton.spec(model, "", None)
        async with contextlib.aclosing(counted(decoded, backend)) as chunks:
            async for chunk in chunks:
                for start in range(0, len(chunk), spec.max_batch):
                    part = slice(start, start + spec.max_batch)
                    yield await self._frames_inferred(request, spec, chunk, part)

    async def _frames_inferred(
        self,
        request: service_pb2.ModelInferRequest,
        spec: ModelSpec,
        chunk: FrameChunk,
        part: slice,
    ) -> service_pb2.ModelInferResponse:
        frames = chunk.tensors[part]
        if frames.shape[1:] != (3, spec.height, spec.width):
            raise InferError(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"frames of {list(frames.shape[1:])} do not fit model {spec.name!r}, whose "
                f"input is [N, 3, {spec.height}, {spec.width}]: ask for its geometry",
            )
        async with self.triton.ring.slot(None) as slot:
            slot.view(frames.shape)[:] = frames
            upstream = service_pb2.ModelInferRequest(model_name=spec.name, id=request.id)
            tensor = upstream.inputs.add(name=spec.input, datatype="UINT8", shape=frames.shape)
            tensor.parameters["shared_memory_region"].string_param = slot.name
            tensor.parameters["shared_memory_byte_size"].int64_param = frames.nbytes
            response = await self.triton.infer(upstream, slot, None)
        metrics.SHM_BYTES.inc(frames.nbytes)
        response.model_name, response.model_version = preprocessing.VIDEO_MODEL, VERSION
        kserve.add_output(response, preprocessing.FRAME_INDEX, chunk.indices[part])
        kserve.add_output(response, preprocessing.TIMESTAMP, chunk.timestamps[part])
        response.parameters[preprocessing.FINAL_RESPONSE].bool_param = False
        return response


async def watch_health(server: RunningServer, triton: LocalTriton, stop: asyncio.Event) -> None:
    """The pod's gRPC health follows its Triton's readiness: Envoy sends it nothing while its
    Triton cannot answer (starting, restarting)."""
    serving: bool | None = None
    while not stop.is_set():
        now = await triton.ready(time_left=HEALTH_PERIOD_S)
        if now and not serving:  # (re)started: its regions go first, they may be lost
            try:
                await triton.register()
            except InferError as exc:
                logger.warning("%s", exc.message)
                now = False
        if now != serving:
            serving = now
            await server.set_serving(now)
            logger.info("Triton at %s %s: %s", triton.url, "ready" if now else "not ready",
                        "SERVING" if now else "NOT_SERVING")  # fmt: skip
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), HEALTH_PERIOD_S if serving else STARTING_PERIOD_S)
