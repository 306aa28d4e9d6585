"""middleman configuration: ``INFERLINE_MIDDLEMAN_*`` environment variables or flags."""

from __future__ import annotations

from dataclasses import dataclass

from inferline.config import require
from inferline.imaging.settings import require_video_settings

PREFIX = "INFERLINE_MIDDLEMAN"


@dataclass(frozen=True)
class Config:
    host: str = "0.0.0.0"
    port: int = 8080
    metrics_port: int = 9180
    # Where inference goes: Triton directly, the batcher, or Envoy in front of either.
    triton_url: str = "localhost:8001"
    triton_model: str = "efficientnet_lite0"
    triton_input: str = "INPUT"
    triton_output: str = "PROBS"
    # Where decoding happens: "" decodes in this process; host:port calls a preprocess service
    # (models preprocess and preprocess_video), whose own settings then apply to geometry,
    # limits and video sampling; crop must match its output.
    preprocess_url: str = ""
    decode_threads: int = 2
    resize: int = 256
    crop: int = 224
    max_batch: int = 64
    max_image_bytes: int = 16 * 1024 * 1024  # checked here on both paths (before sending)
    max_pixels: int = 40_000_000
    # classifier_video, decoding in process: limits and default sampling (as preprocess's).
    max_video_bytes: int = 32 * 1024 * 1024
    max_video_pixels: int = 3840 * 2160
    max_video_frames: int = 18_000
    max_video_duration_s: float = 600.0
    video_fps: float = 1.0
    video_every_n: int = 0
    video_max_samples: int = 256
    video_chunk_frames: int = 16
    video_top_k: int = 5  # classes per frame when a request names no output
    max_message_bytes: int = 64 * 1024 * 1024
    upstream_timeout_s: float = 30.0
    labels_file: str = ""
    grace_s: float = 5.0

    def __post_init__(self) -> None:
        require(0 <= self.port < 65536, PREFIX, "port", "must be a TCP port (0 picks one)")
        require(0 <= self.metrics_port < 65536, PREFIX, "metrics_port", "must be a TCP port")
        require(bool(self.triton_url), PREFIX, "triton_url", "must be host:port")
        require(self.decode_threads > 0, PREFIX, "decode_threads", "must be at least 1")
        require(self.max_batch > 0, PREFIX, "max_batch", "must be at least 1")
        require(0 < self.crop <= self.resize, PREFIX, "crop", "must be > 0 and <= resize")
        require(self.max_image_bytes > 0, PREFIX, "max_image_bytes", "must be positive")
        require(self.max_pixels > 0, PREFIX, "max_pixels", "must be positive")
        require(self.video_top_k > 0, PREFIX, "video_top_k", "must be positive")
        require_video_settings(self, PREFIX)
        require(self.upstream_timeout_s > 0, PREFIX, "upstream_timeout_s", "must be positive")
        require(self.grace_s >= 0, PREFIX, "grace_s", "must not be negative")
