"""The thin gRPC layer: KServe v2 models ``classifier`` and ``classifier_video``, answering as
Triton would. What a request means (inputs, outputs, deadlines, the models' descriptions) is
in :mod:`middleman.inputs`, :mod:`middleman.outputs`, :mod:`middleman.budget` and
:mod:`middleman.models`; errors become gRPC statuses at :func:`inferline.errors.grpc_boundary`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

from prometheus_client import Counter, Histogram
from tritonclient.grpc import service_pb2

from inferline import kserve
from inferline.errors import grpc_boundary, grpc_stream_boundary, invalid
from inferline.metrics import LATENCY_BUCKETS
from inferline.servicer import Context, KServeServicer
from middleman import inputs, outputs
from middleman.budget import Budget
from middleman.models import MODEL, MODELS, VIDEO_MODEL, model_config, model_metadata
from middleman.pipeline import Preprocessor, TritonUpstream
from middleman.video import VideoClassifier

logger = logging.getLogger(__name__)

IMAGES = Counter("inferline_middleman_images_total", "Images classified", ["model"])
FRAMES = Counter("inferline_middleman_frames_total", "Video frames classified", ["model"])
STAGE_SECONDS = Histogram(
    "inferline_middleman_stage_duration_seconds",
    "Time spent in each stage of a request: decode, infer, postprocess",
    ["model", "stage"],
    buckets=LATENCY_BUCKETS,
)


class ClassifierService(KServeServicer):
    server_name = "inferline-middleman"
    models = MODELS
    extensions = ("classification", "model_configuration")

    def __init__(
        self,
        preprocess: Preprocessor,
        upstream: TritonUpstream,
        labels: tuple[str, ...],
        max_batch: int,
        default_timeout: float,
        video: VideoClassifier,
        video_top_k: int = 5,
    ) -> None:
        self.preprocess, self.upstream, self.video = preprocess, upstream, video
        self.labels, self.max_batch, self.default_timeout = labels, max_batch, default_timeout
        self.video_top_k = video_top_k

    # -- health and metadata ------------------------------------------------------------------

    async def ready(self) -> bool:
        return await self.upstream.ready()

    @grpc_boundary
    async def ModelMetadata(
        self, request: service_pb2.ModelMetadataRequest, context: Context
    ) -> service_pb2.ModelMetadataResponse:
        self.check_model(request.name, request.version)
        return model_metadata(request.name, len(self.labels))

    @grpc_boundary
    async def ModelConfig(
        self, request: service_pb2.ModelConfigRequest, context: Context
    ) -> service_pb2.ModelConfigResponse:
        self.check_model(request.name, request.version)
        config = model_config(request.name, len(self.labels), self.max_batch)
        return service_pb2.ModelConfigResponse(config=config)

    # -- inference ----------------------------------------------------------------------------

    @grpc_boundary
    async def ModelInfer(
        self, request: service_pb2.ModelInferRequest, context: Context
    ) -> service_pb2.ModelInferResponse:
        self.check_model(request.model_name, request.model_version)
        if request.model_name == VIDEO_MODEL:
            raise invalid(
                f"model {VIDEO_MODEL!r} streams one response per frame: call ModelStreamInfer"
            )
        counts = outputs.requested(request)
        images = inputs.images(request, self.max_batch)
        budget = Budget.start(context.time_remaining(), self.default_timeout)

        start = time.perf_counter()
        batch = await self.preprocess(images, budget.left())
        decoded = time.perf_counter()
        probabilities = await self.upstream.infer(batch, budget.left())
        inferred = time.perf_counter()
        response = outputs.classifier_response(request.id, counts, probabilities, self.labels)
        STAGE_SECONDS.labels(MODEL, "decode").observe(decoded - start)
        STAGE_SECONDS.labels(MODEL, "infer").observe(inferred - decoded)
        STAGE_SECONDS.labels(MODEL, "postprocess").observe(time.perf_counter() - inferred)
        IMAGES.labels(MODEL).inc(len(images))
        return response

    # -- video --------------------------------------------------------------------------------

    @grpc_stream_boundary
    async def ModelStreamInfer(
        self, requests: AsyncIterator[service_pb2.ModelInferRequest], context: Context
    ) -> AsyncIterator[service_pb2.ModelStreamInferResponse]:
        async for request in requests:
            self.check_model(request.model_name, request.model_version)
            if request.model_name != VIDEO_MODEL:
                raise invalid(f"model {request.model_name!r} is not streamed: call ModelInfer")
            counts = outputs.video_requested(request, self.video_top_k)
            video = inputs.video(request)
            remaining = context.time_remaining()
            async for frame in self.video(video, kserve.parameters(request), remaining):
                response = outputs.frame_response(request.id, counts, frame, self.labels)
                FRAMES.labels(VIDEO_MODEL).inc()
                yield service_pb2.ModelStreamInferResponse(infer_response=response)
