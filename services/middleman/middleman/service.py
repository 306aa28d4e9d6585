"""The thin gRPC layer: KServe v2 models ``classifier`` (the default classifier), every
classifier under its own name, and ``classifier_video``, answering as Triton would. Which models
those are is :mod:`middleman.classifiers`; what a request means (inputs, outputs, deadlines,
the models' descriptions) is in :mod:`middleman.inputs`, :mod:`middleman.outputs`,
:mod:`middleman.budget` and :mod:`middleman.models`; errors become gRPC statuses at
:func:`inferline.errors.grpc_boundary`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Iterator

import grpc
from prometheus_client import Counter, Histogram
from tritonclient.grpc import service_pb2

from inferline import kserve, tracing
from inferline.admission import Admission, Overloaded
from inferline.errors import InferError, grpc_boundary, grpc_stream_boundary, invalid
from inferline.imaging.decode import Limits
from inferline.metrics import LATENCY_BUCKETS
from inferline.sequence import chunked
from inferline.servicer import Context, KServeServicer
from middleman import inputs, outputs
from middleman.budget import Budget, Expired
from middleman.classifiers import Classifier, Classifiers
from middleman.frames import Video
from middleman.models import VIDEO_MODEL, describe
from middleman.pipeline import Preprocessor, TritonUpstream, check_sizes
from middleman.video import VideoClassifier

logger = logging.getLogger(__name__)

REFUSAL_REASONS = ("requests", "bytes", "load", "deadline", "message")
STAGES = ("decoding", "inference")  # what a request's budget is spent on, in order

IMAGES = Counter("inferline_middleman_images_total", "Images classified", ["model"])
FRAMES = Counter("inferline_middleman_frames_total", "Video frames classified", ["model"])
STAGE_SECONDS = Histogram(
    "inferline_middleman_stage_duration_seconds",
    "Time spent in each stage of a request: decode, infer, postprocess",
    ["model", "stage"],
    buckets=LATENCY_BUCKETS,
)
REFUSED = Counter(
    "inferline_middleman_refused_requests_total",
    "Requests refused at admission, by reason: requests or bytes (a hard bound), load (what is "
    "in flight would not let it finish in time), message (over the public message limit): "
    "RESOURCE_EXHAUSTED; deadline (shorter than the pipeline needs at its working load): "
    "DEADLINE_EXCEEDED",
    ["model", "reason"],
)
EXPIRED = Counter(
    "inferline_middleman_expired_requests_total",
    "Requests whose deadline passed before a stage could start (never sent to that stage)",
    ["model", "stage"],
)


class ClassifierService(KServeServicer):
    server_name = "inferline-middleman"
    extensions = ("classification", "model_configuration")

    def __init__(
        self,
        preprocess: Preprocessor | None,
        upstream: TritonUpstream,
        classifiers: Classifiers,
        max_batch: int,
        default_timeout: float,
        video: VideoClassifier,
        admission: Admission,
        max_message_bytes: int,
        video_top_k: int = 5,
        limits: Limits | None = None,
    ) -> None:
        """``preprocess`` None: the in-pod placement (images go on encoded, each within
        ``limits``' byte bound, and are decoded beside Triton)."""
        self.preprocess, self.upstream, self.video = preprocess, upstream, video
        self.classifiers, self.models = classifiers, classifiers.names
        self.max_batch, self.default_timeout = max_batch, default_timeout
        self.admission, self.max_message_bytes = admission, max_message_bytes
        self.video_top_k = video_top_k
        self.limits = limits or Limits()
        for model in self.models:  # every series from 0, so the first refusal is a rate too
            for reason in REFUSAL_REASONS:
                REFUSED.labels(model, reason)
            for stage in STAGES:
                EXPIRED.labels(model, stage)

    # -- health and metadata ------------------------------------------------------------------

    async def ready(self) -> bool:
        return await self.upstream.ready(c.model for c in self.classifiers.distinct)

    def classifier(self, name: str) -> Classifier:
        """The classifier behind public model ``name`` (``classifier_video``: the default)."""
        return self.classifiers.by_name.get(name, self.classifiers.default)

    def metadata(self, name: str, version: str = "") -> service_pb2.ModelMetadataResponse:
        """Model ``name``'s metadata, as Triton describes a model (NOT_FOUND when not served)."""
        self.check_model(name, version)
        return describe(name, len(self.classifier(name).labels), self.max_batch).metadata()

    def config(self, name: str, version: str = "") -> service_pb2.ModelConfigResponse:
        """Model ``name``'s configuration, as Triton's ``ModelConfig`` answers."""
        self.check_model(name, version)
        model = describe(name, len(self.classifier(name).labels), self.max_batch)
        return service_pb2.ModelConfigResponse(config=model.config())

    @grpc_boundary
    async def ModelMetadata(
        self, request: service_pb2.ModelMetadataRequest, context: Context
    ) -> service_pb2.ModelMetadataResponse:
        return self.metadata(request.name, request.version)

    @grpc_boundary
    async def ModelConfig(
        self, request: service_pb2.ModelConfigRequest, context: Context
    ) -> service_pb2.ModelConfigResponse:
        return self.config(request.name, request.version)

    # -- inference ----------------------------------------------------------------------------

    @grpc_boundary
    async def ModelInfer(
        self, request: service_pb2.ModelInferRequest, context: Context
    ) -> service_pb2.ModelInferResponse:
        return await self.infer(request, context.time_remaining())

    async def infer(
        self, request: service_pb2.ModelInferRequest, time_remaining: float | None
    ) -> service_pb2.ModelInferResponse:
        """One image model request, whichever transport it came by (gRPC, or REST converted to
        the same message): validated, admitted, decoded, classified. Raises InferError."""
        self.check_model(request.model_name, request.model_version)
        if request.model_name == VIDEO_MODEL:
            raise invalid(
                f"model {VIDEO_MODEL!r} streams one response per frame: call ModelStreamInfer"
            )
        model = request.model_name
        classifier = self.classifier(model)
        self.check_size(request, model)
        counts = outputs.requested(request)
        images = inputs.images(request, self.max_batch)
        budget = Budget.start(time_remaining, self.default_timeout)
        with self.admitted(model, len(images), sum(map(len, images)), budget):
            start = time.perf_counter()
            if self.preprocess is None:  # in-pod: decoded beside Triton, after the batcher
                check_sizes(images, self.limits)
                decoded = start
                probabilities = await self.upstream.classify(
                    classifier, images, budget.left(STAGES[1])
                )
            else:
                batch = await self.preprocess(images, classifier.geometry, budget.left(STAGES[0]))
                decoded = time.perf_counter()
                probabilities = await self.upstream.infer(classifier, batch, budget.left(STAGES[1]))
            inferred = time.perf_counter()
            response = outputs.classifier_response(
                model, request.id, counts, probabilities, classifier.labels
            )
        if self.preprocess is not None:
            STAGE_SECONDS.labels(model, "decode").observe(decoded - start)
        STAGE_SECONDS.labels(model, "infer").observe(inferred - decoded)
        STAGE_SECONDS.labels(model, "postprocess").observe(time.perf_counter() - inferred)
        IMAGES.labels(model).inc(len(images))
        return response

    def check_size(self, request: service_pb2.ModelInferRequest, model: str) -> None:
        """The public message limit, named; inner hops accept a little more (their framing)."""
        size = request.ByteSize()
        if size > self.max_message_bytes:
            REFUSED.labels(model, "message").inc()
            advice = "send fewer or smaller images per request"
            if model == VIDEO_MODEL:
                advice = (
                    "send the video in smaller chunks (sequence_id, sequence_start, sequence_end)"
                )
            raise InferError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"the request is {size} bytes, over the limit of {self.max_message_bytes} "
                f"(INFERLINE_MIDDLEMAN_MAX_MESSAGE_BYTES): {advice}",
            )

    @contextlib.contextmanager
    def admitted(self, model: str, items: int, nbytes: int, budget: Budget) -> Iterator[None]:
        """Hold an admission ticket while the body runs; a body that ends without an exception
        answered its request, and its items count as the pipeline's throughput.

        A refusal is answered at once, saying why: RESOURCE_EXHAUSTED for the load, or
        DEADLINE_EXCEEDED for a deadline shorter than the fastest answer the pipeline has given.
        A stage that could not start in time is DEADLINE_EXCEEDED, naming the stage. All counted.
        """
        try:
            ticket = self.admission.admit(items, nbytes, budget.remaining())
        except Overloaded as exc:
            REFUSED.labels(model, exc.reason).inc()
            code = grpc.StatusCode.RESOURCE_EXHAUSTED
            if exc.reason == "deadline":  # too short for this pipeline, whatever the load
                code = grpc.StatusCode.DEADLINE_EXCEEDED
            raise InferError(code, str(exc)) from None
        try:
            yield
        except Expired as exc:
            self.admission.release(ticket, completed=False)
            EXPIRED.labels(model, exc.stage).inc()
            raise InferError(grpc.StatusCode.DEADLINE_EXCEEDED, str(exc)) from None
        except BaseException:  # failed, cancelled, or a stream whose caller left
            self.admission.release(ticket, completed=False)
            raise
        self.admission.release(ticket, completed=True)

    # -- video --------------------------------------------------------------------------------

    @grpc_stream_boundary
    async def ModelStreamInfer(
        self, requests: AsyncIterator[service_pb2.ModelInferRequest], context: Context
    ) -> AsyncIterator[service_pb2.ModelStreamInferResponse]:
        """``classifier_video``: one video per request, or per sequence of chunks (read here
        and, while its frames are classified, by the video's forwarding or spool)."""
        stream = aiter(requests)
        answering = False  # response headers sent
        async for request in stream:
            self._video_request(request)
            counts = outputs.video_requested(request, self.video_top_k)
            video: Video | None = chunked(request, stream, self._video_chunk)
            if video is None:
                video = inputs.video(request)
            elif not answering:
                # Headers now, not with the first frame: a proxy in front (Envoy) keeps a
                # request's body to retry it until the response begins, up to the message
                # limit; a video in chunks cannot be retried, and its chunks need not be kept.
                await context.send_initial_metadata(())
                answering = True
            remaining = context.time_remaining()
            budget = Budget.start(remaining, self.default_timeout)
            # A video's frames are not known before it is opened: it counts against the hard
            # bounds (one request, the bytes it holds here), not the throughput estimate.
            held = len(video) if isinstance(video, bytes) else 0
            in_chunks = not isinstance(video, bytes)
            upload = {"inferline.video.chunked": in_chunks, "inferline.request.id": request.id}
            with self.admitted(VIDEO_MODEL, 0, held, budget), tracing.step("video", upload) as span:
                labels = self.classifiers.default.labels
                params = kserve.parameters(request)
                async with self.video(video, params, remaining) as frames:
                    async for frame in frames:  # one span per video, an event per frame
                        span.add_event(
                            "frame",
                            {
                                "inferline.frame.index": int(frame.index),
                                "inferline.frame.timestamp": float(frame.timestamp),
                            },
                        )
                        response = outputs.frame_response(request.id, counts, frame, labels)
                        FRAMES.labels(VIDEO_MODEL).inc()
                        answering = True
                        yield service_pb2.ModelStreamInferResponse(infer_response=response)

    def _video_request(self, request: service_pb2.ModelInferRequest) -> None:
        """A ``classifier_video`` request, within the public message limit."""
        self.check_model(request.model_name, request.model_version)
        if request.model_name != VIDEO_MODEL:
            raise invalid(f"model {request.model_name!r} is not streamed: call ModelInfer")
        self.check_size(request, VIDEO_MODEL)

    def _video_chunk(self, request: service_pb2.ModelInferRequest) -> bytes:
        """The bytes of one chunk of a video in chunks."""
        self._video_request(request)
        return inputs.video(request)
