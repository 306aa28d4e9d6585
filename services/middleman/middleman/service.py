"""The thin gRPC layer: KServe v2 model ``classifier``, answering as Triton would."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

import numpy as np
from prometheus_client import Counter, Histogram
from tritonclient.grpc import model_config_pb2, service_pb2

from inferline import kserve
from inferline.errors import grpc_boundary, grpc_stream_boundary, invalid
from inferline.metrics import LATENCY_BUCKETS
from inferline.servicer import Context, KServeServicer
from middleman.pipeline import Preprocessor, TritonUpstream
from middleman.video import ClassifiedFrame, VideoClassifier

logger = logging.getLogger(__name__)

MODEL = "classifier"
VIDEO_MODEL = "classifier_video"
MODELS = (MODEL, VIDEO_MODEL)
INPUT = "IMAGE"
VIDEO_INPUT = "VIDEO"
OUTPUT = "PROBABILITIES"
VIDEO_OUTPUTS = ("FRAME_INDEX", "TIMESTAMP", OUTPUT)
INPUT_HINT = "BYTES [N], each element one encoded JPEG, PNG, WebP, BMP or GIF file"
VIDEO_HINT = "BYTES [1], one whole mp4, mkv or webm file"

IMAGES = Counter("inferline_middleman_images_total", "Images classified", ["model"])
FRAMES = Counter("inferline_middleman_frames_total", "Video frames classified", ["model"])
STAGE_SECONDS = Histogram(
    "inferline_middleman_stage_duration_seconds",
    "Time spent in each stage of a request",
    ["stage"],
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
        tensor = service_pb2.ModelMetadataResponse.TensorMetadata
        if request.name == VIDEO_MODEL:
            return service_pb2.ModelMetadataResponse(
                name=VIDEO_MODEL,
                versions=["1"],
                platform="inferline",
                inputs=[tensor(name=VIDEO_INPUT, datatype="BYTES", shape=[1])],
                outputs=[
                    tensor(name="FRAME_INDEX", datatype="INT64", shape=[1]),
                    tensor(name="TIMESTAMP", datatype="FP64", shape=[1]),
                    tensor(name=OUTPUT, datatype="FP32", shape=[1, len(self.labels)]),
                ],
            )
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
        self.check_model(request.name, request.version)
        if request.name == VIDEO_MODEL:
            return service_pb2.ModelConfigResponse(config=self._video_config())
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
        self.check_model(request.model_name, request.model_version)
        if request.model_name == VIDEO_MODEL:
            raise invalid(
                f"model {VIDEO_MODEL!r} streams one response per frame: call ModelStreamInfer"
            )
        counts = self._requested(request)
        images = kserve.find_batch(request, INPUT, INPUT_HINT, self.max_batch)
        remaining = context.time_remaining()
        deadline = time.monotonic() + (remaining if remaining else self.default_timeout)

        start = time.perf_counter()
        batch = await self.preprocess(images, deadline - time.monotonic())
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

    # -- video --------------------------------------------------------------------------------

    @grpc_stream_boundary
    async def ModelStreamInfer(
        self, requests: AsyncIterator[service_pb2.ModelInferRequest], context: Context
    ) -> AsyncIterator[service_pb2.ModelStreamInferResponse]:
        async for request in requests:
            self.check_model(request.model_name, request.model_version)
            if request.model_name != VIDEO_MODEL:
                raise invalid(f"model {request.model_name!r} is not streamed: call ModelInfer")
            outputs = self._video_requested(request)
            video = kserve.find_input(request, VIDEO_INPUT, "BYTES", VIDEO_HINT)
            if video.shape != (1,):
                raise invalid(f"input {VIDEO_INPUT!r} must have shape [1]; got {list(video.shape)}")
            remaining = context.time_remaining()
            frames = self.video(video[0], kserve.parameters(request), remaining)
            async for frame in frames:
                response = self._frame_response(request, frame, outputs)
                FRAMES.labels(VIDEO_MODEL).inc()
                yield service_pb2.ModelStreamInferResponse(infer_response=response)

    def _frame_response(
        self,
        request: service_pb2.ModelInferRequest,
        frame: ClassifiedFrame,
        outputs: dict[str, int],
    ) -> service_pb2.ModelInferResponse:
        response = service_pb2.ModelInferResponse(
            model_name=VIDEO_MODEL, model_version="1", id=request.id
        )
        for name, k in outputs.items():
            if name == "FRAME_INDEX":
                kserve.add_output(response, name, np.array([frame.index], np.int64))
            elif name == "TIMESTAMP":
                kserve.add_output(response, name, np.array([frame.timestamp], np.float64))
            elif k:
                row = frame.probabilities[np.newaxis]
                kserve.add_output(response, name, kserve.classify(row, k, self.labels))
            else:
                kserve.add_output(response, name, frame.probabilities[np.newaxis])
        response.parameters["triton_final_response"].bool_param = frame.last
        return response

    def _video_requested(self, request: service_pb2.ModelInferRequest) -> dict[str, int]:
        """Outputs -> class_count; by default all three, with the top ``video_top_k`` classes."""
        if not request.outputs:
            return {"FRAME_INDEX": 0, "TIMESTAMP": 0, OUTPUT: self.video_top_k}
        counts: dict[str, int] = {}
        for output in request.outputs:
            if output.name not in VIDEO_OUTPUTS:
                names = ", ".join(repr(n) for n in VIDEO_OUTPUTS)
                raise invalid(f"unknown output {output.name!r}: model {VIDEO_MODEL!r} has {names}")
            counts[output.name] = kserve.class_count(output) if output.name == OUTPUT else 0
        return counts

    def _video_config(self) -> model_config_pb2.ModelConfig:
        mc = model_config_pb2
        return mc.ModelConfig(
            name=VIDEO_MODEL,
            platform="inferline",
            max_batch_size=0,
            input=[mc.ModelInput(name=VIDEO_INPUT, data_type=mc.TYPE_STRING, dims=[1])],
            output=[
                mc.ModelOutput(name="FRAME_INDEX", data_type=mc.TYPE_INT64, dims=[1]),
                mc.ModelOutput(name="TIMESTAMP", data_type=mc.TYPE_FP64, dims=[1]),
                mc.ModelOutput(name=OUTPUT, data_type=mc.TYPE_FP32, dims=[1, len(self.labels)]),
            ],
            model_transaction_policy=mc.ModelTransactionPolicy(decoupled=True),
        )

    # -- helpers ------------------------------------------------------------------------------

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
