"""The thin gRPC layer: KServe v2 model ``classifier``, answering as Triton would."""

from __future__ import annotations

import logging
import time
from typing import Any, TypeAlias

import grpc
from prometheus_client import Counter, Histogram
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from inferline import kserve
from inferline.errors import InferError, grpc_boundary, invalid
from inferline.metrics import LATENCY_BUCKETS
from middleman.pipeline import Preprocessor, TritonUpstream

logger = logging.getLogger(__name__)

MODEL = "classifier"
INPUT = "IMAGE"
OUTPUT = "PROBABILITIES"
INPUT_HINT = "BYTES [N], each element one encoded JPEG, PNG, WebP, BMP or GIF file"
SERVER_NAME = "inferline-middleman"
VERSION = "0.1.0"

IMAGES = Counter("inferline_middleman_images_total", "Images classified", ["model"])
STAGE_SECONDS = Histogram(
    "inferline_middleman_stage_duration_seconds",
    "Time spent in each stage of a request",
    ["stage"],
    buckets=LATENCY_BUCKETS,
)

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


class ClassifierService(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(
        self,
        preprocess: Preprocessor,
        upstream: TritonUpstream,
        labels: tuple[str, ...],
        max_batch: int,
        default_timeout: float,
    ) -> None:
        self.preprocess, self.upstream = preprocess, upstream
        self.labels, self.max_batch, self.default_timeout = labels, max_batch, default_timeout

    # -- health and metadata ------------------------------------------------------------------

    async def ServerLive(
        self, request: service_pb2.ServerLiveRequest, context: Context
    ) -> service_pb2.ServerLiveResponse:
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(
        self, request: service_pb2.ServerReadyRequest, context: Context
    ) -> service_pb2.ServerReadyResponse:
        return service_pb2.ServerReadyResponse(ready=await self.upstream.ready())

    async def ServerMetadata(
        self, request: service_pb2.ServerMetadataRequest, context: Context
    ) -> service_pb2.ServerMetadataResponse:
        return service_pb2.ServerMetadataResponse(
            name=SERVER_NAME, version=VERSION, extensions=["classification", "model_configuration"]
        )

    async def ModelReady(
        self, request: service_pb2.ModelReadyRequest, context: Context
    ) -> service_pb2.ModelReadyResponse:
        ready = request.name == MODEL and await self.upstream.ready()
        return service_pb2.ModelReadyResponse(ready=ready)

    @grpc_boundary
    async def ModelMetadata(
        self, request: service_pb2.ModelMetadataRequest, context: Context
    ) -> service_pb2.ModelMetadataResponse:
        self._check_model(request.name, request.version)
        tensor = service_pb2.ModelMetadataResponse.TensorMetadata
        return service_pb2.ModelMetadataResponse(
            name=MODEL,
            versions=["1"],
            platform="inferline",
            inputs=[tensor(name=INPUT, datatype="BYTES", shape=[-1])],
            outputs=[tensor(name=OUTPUT, datatype="FP32", shape=[-1, len(self.labels)])],
        )

    @grpc_boundary
    async def ModelConfig(
        self, request: service_pb2.ModelConfigRequest, context: Context
    ) -> service_pb2.ModelConfigResponse:
        self._check_model(request.name, request.version)
        config = model_config_pb2.ModelConfig(
            name=MODEL,
            platform="inferline",
            max_batch_size=self.max_batch,
            input=[
                model_config_pb2.ModelInput(
                    name=INPUT, data_type=model_config_pb2.TYPE_STRING, dims=[1]
                )
            ],
            output=[
                model_config_pb2.ModelOutput(
                    name=OUTPUT, data_type=model_config_pb2.TYPE_FP32, dims=[len(self.labels)]
                )
            ],
        )
        return service_pb2.ModelConfigResponse(config=config)

    # -- inference ----------------------------------------------------------------------------

    @grpc_boundary
    async def ModelInfer(
        self, request: service_pb2.ModelInferRequest, context: Context
    ) -> service_pb2.ModelInferResponse:
        self._check_model(request.model_name, request.model_version)
        counts = self._requested(request)
        images = kserve.find_input(request, INPUT, "BYTES", INPUT_HINT)
        if images.ndim != 1 or not 0 < images.shape[0] <= self.max_batch:
            raise invalid(
                f"input {INPUT!r} must have shape [N] with 1 <= N <= {self.max_batch} "
                f"(max_batch); got {list(images.shape)}"
            )
        remaining = context.time_remaining()
        deadline = time.monotonic() + (remaining if remaining else self.default_timeout)

        start = time.perf_counter()
        batch = await self.preprocess(list(images), deadline - time.monotonic())
        decoded = time.perf_counter()
        probabilities = await self.upstream.infer(batch, max(deadline - time.monotonic(), 0.001))
        inferred = time.perf_counter()

        response = service_pb2.ModelInferResponse(
            model_name=MODEL, model_version="1", id=request.id
        )
        for name, k in counts.items():
            if k:
                kserve.add_output(response, name, kserve.classify(probabilities, k, self.labels))
            else:
                kserve.add_output(response, name, probabilities)
        STAGE_SECONDS.labels("decode").observe(decoded - start)
        STAGE_SECONDS.labels("infer").observe(inferred - decoded)
        STAGE_SECONDS.labels("postprocess").observe(time.perf_counter() - inferred)
        IMAGES.labels(MODEL).inc(len(images))
        return response

    # -- helpers ------------------------------------------------------------------------------

    @staticmethod
    def _check_model(name: str, version: str) -> None:
        if name != MODEL:
            raise InferError(
                grpc.StatusCode.NOT_FOUND,
                f"unknown model {name!r}: this server serves {MODEL!r}",
            )
        if version not in ("", "1"):
            raise InferError(
                grpc.StatusCode.NOT_FOUND, f"model {MODEL!r} has no version {version!r}; use 1"
            )

    @staticmethod
    def _requested(request: service_pb2.ModelInferRequest) -> dict[str, int]:
        """Requested outputs -> class_count (0 = probabilities); all outputs when none named."""
        if not request.outputs:
            return {OUTPUT: 0}
        counts: dict[str, int] = {}
        for output in request.outputs:
            if output.name != OUTPUT:
                raise invalid(f"unknown output {output.name!r}: model {MODEL!r} has {OUTPUT!r}")
            counts[output.name] = kserve.class_count(output)
        return counts
