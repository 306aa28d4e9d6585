"""middleman configuration: ``INFERLINE_MIDDLEMAN_*`` environment variables or flags."""

from __future__ import annotations

from dataclasses import dataclass

from inferline import capacity
from inferline.config import require
from inferline.imaging.settings import require_video_settings
from inferline.tls import require_tls

PREFIX = "INFERLINE_MIDDLEMAN"
IN_POD, REMOTE, IN_PROCESS = "in-pod", "remote", "in-process"
PLACEMENTS = (IN_POD, REMOTE, IN_PROCESS)


@dataclass(frozen=True)
class Config:
    host: str = "0.0.0.0"
    port: int = 8080  # KServe v2 gRPC
    rest_port: int = 8000  # KServe v2 HTTP/REST (Triton's HTTP port)
    metrics_port: int = 9180
    # Where inference goes: Triton directly, the batcher, or Envoy in front of either.
    triton_url: str = "localhost:8001"
    # The default model, also served as `classifier` (and classifying classifier_video's frames).
    triton_model: str = "efficientnet_lite0"
    # The model repository whose model cards (inferline.json, labels.txt) describe the models
    # served; "" describes the default model by the settings below alone.
    repository: str = ""
    # More models served beside the default, each under its own name: "*" every classifier in
    # the repository, or a comma-separated list ("" none).
    models: str = "*"
    # For a model without a model card: its tensors, geometry and labels.
    triton_input: str = "INPUT"
    triton_output: str = "PROBS"
    # Where images are decoded (docs/architecture.md, Placements): "in-pod", by the preprocess
    # beside each Triton, which triton_url (the batcher) reaches with the encoded images;
    # "remote", by the preprocess service at preprocess_url; "in-process", here. "" : remote
    # when preprocess_url is set, else in-process.
    placement: str = ""
    # The preprocess service (models preprocess and preprocess_video), told each request's
    # geometry; its own settings apply to limits and video sampling. Remote decoding only.
    preprocess_url: str = ""
    decode_threads: int = 2
    resize: int = 256
    crop: int = 224
    max_batch: int = 64
    max_image_bytes: int = capacity.MAX_IMAGE_BYTES  # checked here on both paths (before sending)
    # Decoding in process: the pixels decoded per image (a JPEG at its DCT scale, see
    # docs/reliability.md).
    max_pixels: int = 40_000_000
    # classifier_video, decoding in process: limits and default sampling (as preprocess's).
    max_video_bytes: int = 32 * 1024 * 1024
    # A video in chunks (one ModelStreamInfer sequence) is spooled to a temporary file (TMPDIR)
    # as it arrives, and decoded while it does: this caps that file.
    max_video_stream_bytes: int = 2 * 1024 * 1024 * 1024
    max_video_pixels: int = 3840 * 2160
    max_video_frames: int = 18_000
    max_video_duration_s: float = 600.0
    video_fps: float = 1.0
    video_every_n: int = 0
    video_max_samples: int = 256
    video_chunk_frames: int = 16
    video_top_k: int = 5  # classes per frame when a request names no output
    # The public message limit, named in the refusal; the server's own bound is a little higher
    # (inferline.capacity), so a request just over it gets that message, not gRPC's.
    max_message_bytes: int = capacity.MAX_MESSAGE_BYTES
    # Admission (inferline.admission): the hard bounds on what is in flight, and the
    # requests in flight below which the throughput estimate is not consulted.
    max_inflight: int = capacity.ADMITTED_REQUESTS
    max_inflight_bytes: int = capacity.ADMITTED_BYTES
    admission_floor: int = capacity.ADMISSION_FLOOR_REQUESTS
    # The deadline of a request that sets none (each stage gets what is left of it).
    upstream_timeout_s: float = capacity.DEFAULT_DEADLINE_S
    labels_file: str = ""
    grace_s: float = 5.0
    # TLS on this service's own port(s) (inferline.tls): certificate and key files (PEM) to
    # serve TLS; with a CA too, mutual TLS: clients (Envoy) must present a certificate it signed.
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""

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
        require(0 < self.crop <= self.resize, PREFIX, "crop", "must be > 0 and <= resize")
        require(self.max_image_bytes > 0, PREFIX, "max_image_bytes", "must be positive")
        require(
            self.max_image_bytes < self.max_message_bytes,
            PREFIX,
            "max_image_bytes",
            "must be below max_message_bytes (an image arrives in one message)",
        )
        require(self.max_pixels > 0, PREFIX, "max_pixels", "must be positive")
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
