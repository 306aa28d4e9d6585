"""The image and video settings that preprocess and middleman both configure: declared once
(:class:`ImageFields`, :class:`VideoFields`, which both ``Config`` classes inherit), checked,
then built once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from inferline.config import require
from inferline.imaging.decode import Geometry, Limits
from inferline.imaging.video import Sampling, VideoLimits


@dataclass(frozen=True)
class ImageFields:
    """The image geometry and limits of a service that decodes images: preprocess, and
    middleman (a model without a model card; its limits apply on every placement)."""

    # Shorter side before the centre crop; crop size: for a model without a model card (at
    # preprocess: a request whose parameters resize and crop do not say; middleman sends each
    # model's).
    resize: int = Geometry.resize
    crop: int = Geometry.crop
    # Per image: encoded bytes (INVALID_ARGUMENT above; below max_message_bytes: an image
    # arrives in one message); pixels decoded, checked from the header before decoding (a
    # sequential JPEG at the DCT scale it is decoded at, 1/8 for a 200 MP photo, anything else at
    # full size; docs/reliability.md).
    max_image_bytes: int = Limits.max_bytes
    max_pixels: int = Limits.max_pixels

    @property
    def geometry(self) -> Geometry:
        return Geometry(self.resize, self.crop)

    @property
    def image_limits(self) -> Limits:
        return Limits(self.max_image_bytes, self.max_pixels)


def require_image_settings(config: ImageFields, prefix: str, max_message_bytes: int) -> None:
    """Validate ``config``'s image settings, failing by ``<prefix>_<NAME>``."""
    require(0 < config.crop <= config.resize, prefix, "crop", "must be > 0 and <= resize")
    for name in ("max_image_bytes", "max_pixels"):
        require(getattr(config, name) > 0, prefix, name, "must be positive")
    require(
        config.max_image_bytes < max_message_bytes,
        prefix,
        "max_image_bytes",
        "must be below max_message_bytes (an image arrives in one message)",
    )


@dataclass(frozen=True)
class VideoFields:
    """The video limits and default sampling of a service that decodes videos: preprocess, and
    middleman when it decodes in process (a video in chunks is spooled there then too)."""

    # Per video in one message (models preprocess_video, classifier_video). The video limits are
    # checked from the container before decoding and again while decoding, since a header can
    # lie.
    max_video_bytes: int = 32 * 1024 * 1024
    # Per video in chunks (one ModelStreamInfer sequence, docs/video.md): it is spooled to a
    # temporary file in TMPDIR as it arrives, and decoded while it does; INVALID_ARGUMENT naming
    # it beyond.
    max_video_stream_bytes: int = 2 * 1024 * 1024 * 1024
    max_video_pixels: int = 3840 * 2160  # per frame
    # Frames in the video (10 min at 30 fps) / its duration.
    max_video_frames: int = 18_000
    max_video_duration_s: float = 600.0
    # Default sampling when a request names none: a target rate, or every Nth frame (wins); per
    # request: parameters fps, every_n, max_frames.
    video_fps: float = 1.0
    video_every_n: int = 0
    video_max_samples: int = 256  # frames returned per video, at most: caps a request's max_frames
    video_chunk_frames: int = 16  # frames per streamed response


class VideoSettings(Protocol):
    """A service configuration's video limits and default sampling (frozen dataclass fields)."""

    @property
    def max_video_bytes(self) -> int: ...
    @property
    def max_video_stream_bytes(self) -> int: ...
    @property
    def max_video_pixels(self) -> int: ...
    @property
    def max_video_frames(self) -> int: ...
    @property
    def max_video_duration_s(self) -> float: ...
    @property
    def video_fps(self) -> float: ...
    @property
    def video_every_n(self) -> int: ...
    @property
    def video_max_samples(self) -> int: ...
    @property
    def video_chunk_frames(self) -> int: ...
    @property
    def max_message_bytes(self) -> int: ...


def require_video_settings(config: VideoSettings, prefix: str) -> None:
    """Validate ``config``'s video settings, failing by ``<prefix>_<NAME>``."""
    for name in ("max_video_bytes", "max_video_stream_bytes", "max_video_pixels",
                 "max_video_frames", "max_video_duration_s", "video_max_samples",
                 "video_chunk_frames"):  # fmt: skip
        require(getattr(config, name) > 0, prefix, name, "must be positive")
    require(config.video_fps >= 0, prefix, "video_fps", "must be >= 0")
    require(config.video_every_n >= 0, prefix, "video_every_n", "must be >= 0")
    require(
        config.video_fps > 0 or config.video_every_n > 0,
        prefix,
        "video_fps",
        "video_fps or video_every_n must be positive (a default sampling)",
    )
    require(
        config.max_video_bytes < config.max_message_bytes,
        prefix,
        "max_video_bytes",
        "must be below max_message_bytes (a video arrives in one message)",
    )


def video_limits(config: VideoSettings) -> VideoLimits:
    return VideoLimits(
        config.max_video_bytes,
        config.max_video_pixels,
        config.max_video_frames,
        config.max_video_duration_s,
        config.max_video_stream_bytes,
    )


def default_sampling(config: VideoSettings) -> Sampling:
    """The sampling for a request that names none; ``video_every_n``, when set, wins."""
    return Sampling(
        every_n=config.video_every_n,
        fps=0.0 if config.video_every_n else config.video_fps,
        max_samples=config.video_max_samples,
    )
