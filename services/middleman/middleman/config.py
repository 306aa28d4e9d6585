"""middleman configuration: ``INFERLINE_MIDDLEMAN_*`` environment variables or flags."""

from __future__ import annotations

from dataclasses import dataclass

from inferline import capacity
from inferline.config import require
from inferline.imaging.settings import (
    ImageFields,
    VideoFields,
    require_image_settings,
    require_video_settings,
)
from inferline.tls import Served, require_tls

PREFIX = "INFERLINE_MIDDLEMAN"
IN_POD, REMOTE, IN_PROCESS = "in-pod", "remote", "in-process"
PLACEMENTS = (IN_POD, REMOTE, IN_PROCESS)


@dataclass(frozen=True)
class Config(Served, ImageFields, VideoFields):
    # Listen address (gRPC, REST and /metrics) / gRPC port (KServe v2).
    host: str = "0.0.0.0"
    port: int = 8090
    # KServe v2 HTTP/REST (Triton's HTTP/REST protocol; docs/calling.md).
    rest_port: int = 8093
    metrics_port: int = 9180  # Prometheus /metrics
    # Where inference goes: Triton directly, the batcher, or Envoy in front of either.
    triton_url: str = "localhost:8001"
    # The default model, also served as `classifier` (and classifying classifier_video's frames).
    triton_model: str = "efficientnet_lite0"
    # The model repository whose model cards (inferline.json, labels.txt) describe each served
    # model: name, geometry, labels, tensors (docs/own-model.md); empty: the default model is
    # described by the settings below alone.
    repository: str = ""
    # More models served beside the default, each under its own name: "*" every classifier in
    # the repository, or a comma-separated list ("" none).
    models: str = "*"
    # A model without a model card (the simulated GPU): its input and output tensors.
    triton_input: str = "INPUT"
    triton_output: str = "PROBS"
    # Where images are decoded (docs/architecture.md, Placements): "in-pod", by the preprocess
    # beside each Triton, which triton_url (the batcher) reaches with the encoded images;
    # "remote", by the preprocess service at preprocess_url; "in-process", here. Empty: remote
    # when preprocess_url is set, else in-process.
    placement: str = ""
    # Remote only: the preprocess service (models preprocess and preprocess_video, host:port),
    # told each request's geometry; its own settings apply to limits and video sampling.
    preprocess_url: str = ""
    decode_threads: int = 2  # decoding threads (in process)
    max_batch: int = 64  # images per request
    video_top_k: int = 5  # classes per frame of classifier_video when a request names no output
    # The public message limit: a request over it gets RESOURCE_EXHAUSTED naming it (over REST,
    # a body over it: 413). The server's own bound is a little higher (inner hops accept 64 KiB
    # more, for their framing: inferline.capacity), so a request just over it gets that message,
    # not gRPC's.
    max_message_bytes: int = capacity.MAX_MESSAGE_BYTES
    # Admission's hard bounds (inferline.admission): requests (and their encoded bytes) served at
    # once; more are refused at once with RESOURCE_EXHAUSTED.
    max_inflight: int = capacity.ADMITTED_REQUESTS
    max_inflight_bytes: int = capacity.ADMITTED_BYTES
    # Requests in flight below which admission does not consult its throughput estimate
    # (docs/reliability.md).
    admission_floor: int = capacity.ADMISSION_FLOOR_REQUESTS
    # The deadline of a request that sets none (each stage gets what is left of it).
    upstream_timeout_s: float = capacity.DEFAULT_DEADLINE_S
    # A model without a card: its labels, one per line; empty: ImageNet-1k.
    labels_file: str = ""
    grace_s: float = 5.0  # graceful-stop grace on SIGTERM

    def __post_init__(self) -> None:
        require(0 <= self.port < 65536, PREFIX, "port", "must be a TCP port (0 picks one)")
        require(0 <= self.rest_port < 65536, PREFIX, "rest_port", "must be a TCP port (0: any)")
        require(0 <= self.metrics_port < 65536, PREFIX, "metrics_port", "must be a TCP port")
        require(bool(self.triton_url), PREFIX, "triton_url", "must be host:port")
        require(
            self.placement in ("", *PLACEMENTS),
            PREFIX,
            "placement",
            f"must be one of {', '.join(PLACEMENTS)} (or empty: from preprocess_url)",
        )
        require(
            (self.decoding == REMOTE) == bool(self.preprocess_url),
            PREFIX,
            "preprocess_url",
            "must be set for the remote placement, and only for it",
        )
        require(self.decode_threads > 0, PREFIX, "decode_threads", "must be at least 1")
        require(self.max_batch > 0, PREFIX, "max_batch", "must be at least 1")
        require_image_settings(self, PREFIX, self.max_message_bytes)
        require(self.video_top_k > 0, PREFIX, "video_top_k", "must be positive")
        require_video_settings(self, PREFIX)
        require(self.max_inflight > 0, PREFIX, "max_inflight", "must be at least 1")
        require(self.max_inflight_bytes > 0, PREFIX, "max_inflight_bytes", "must be positive")
        require(self.admission_floor >= 0, PREFIX, "admission_floor", "must not be negative")
        require(
            self.max_message_bytes + capacity.FRAMING_BYTES <= capacity.INNER_MESSAGE_BYTES,
            PREFIX,
            "max_message_bytes",
            f"must be at most {capacity.MAX_MESSAGE_BYTES}: inner hops accept that plus their "
            "framing (inferline.capacity)",
        )
        require(self.upstream_timeout_s > 0, PREFIX, "upstream_timeout_s", "must be positive")
        require(self.grace_s >= 0, PREFIX, "grace_s", "must not be negative")
        require_tls(self, PREFIX)

    @property
    def decoding(self) -> str:
        """The placement: as set, or from ``preprocess_url`` when not."""
        return self.placement or (REMOTE if self.preprocess_url else IN_PROCESS)
