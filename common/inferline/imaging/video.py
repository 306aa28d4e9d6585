"""Video sampling and decoding to model input tensors on the CPU (OpenCV's FFmpeg). No gRPC here.

A video (mp4, mkv, webm; H.264, H.265, VP9 and whatever else FFmpeg decodes) is read from
memory, or from an upload while its chunks arrive (:class:`~inferline.imaging.upload.UploadStream`),
frames are sampled (every Nth, or a target rate by timestamp; the count capped), and
each sampled frame becomes ``uint8 [3, crop, crop]`` exactly as an image would. Frames come out
in chunks, so a long video streams instead of filling memory.

Limits are checked from the container header before decoding (bytes, frame size, frame count,
duration) and again while decoding, since a header can lie; an upload's bytes are capped as they
arrive (:mod:`.upload`).
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt

from inferline.imaging.decode import DecodeError, Geometry, resize_crop
from inferline.imaging.upload import UploadStream

CONTAINERS = "mp4, mkv or webm (H.264, H.265 or VP9)"
# FFmpeg's reads from an upload wait for the sender; OpenCV would otherwise interrupt an open or
# a read that waits longer than its defaults (30 s). The caller's deadline bounds the wait.
NO_TIMEOUTS = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, 2**31 - 1, cv2.CAP_PROP_READ_TIMEOUT_MSEC, 2**31 - 1]

VideoSource = bytes | UploadStream  # a whole video, or one arriving in chunks


@dataclass(frozen=True)
class VideoLimits:
    max_bytes: int = 32 * 1024 * 1024  # a whole video, in one message
    max_pixels: int = 3840 * 2160  # per frame
    max_frames: int = 18_000
    max_duration_s: float = 600.0
    max_stream_bytes: int = 2 * 1024 * 1024 * 1024  # a video in chunks, spooled to disk


@dataclass(frozen=True)
class Sampling:
    """Which frames to keep: every ``every_n``-th frame, or ``fps`` frames per second."""

    every_n: int = 0
    fps: float = 1.0
    max_samples: int = 256

    def __post_init__(self) -> None:
        if self.every_n < 0 or self.fps < 0 or not math.isfinite(self.fps):
            raise ValueError("every_n and fps must be >= 0")
        if (self.every_n > 0) == (self.fps > 0):
            raise ValueError(
                f"give exactly one of every_n and fps (got every_n={self.every_n}, fps={self.fps})"
            )
        if self.max_samples < 1:
            raise ValueError(f"max_frames must be >= 1 (got {self.max_samples})")

    def with_parameters(self, params: Mapping[str, object], cap: int) -> Sampling:
        """This sampling overridden by request parameters ``every_n``, ``fps``, ``max_frames``.

        ``max_frames`` may lower the count but never raise it above ``cap``. Raises ValueError
        with a message for the caller.
        """
        every_n: float = self.every_n
        fps: float = self.fps
        samples: float = self.max_samples
        if "every_n" in params or "fps" in params:
            every_n = _number(params, "every_n", int, 0)
            fps = _number(params, "fps", float, 0.0)
        if "max_frames" in params:
            samples = _number(params, "max_frames", int, samples)
            if samples > cap:
                raise ValueError(f"max_frames={samples} is above this server's cap ({cap})")
        return Sampling(every_n=int(every_n), fps=float(fps), max_samples=int(samples))


def _number(params: Mapping[str, object], name: str, kind: type, default: float) -> float:
    value = params.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"parameter {name!r} must be a number, got {value!r}")
    if kind is int and isinstance(value, float) and not value.is_integer():  # inf, NaN too
        raise ValueError(f"parameter {name!r} must be an integer, got {value!r}")
    return value


@dataclass(frozen=True)
class VideoHeader:
    width: int
    height: int
    fps: float  # 0 when the container does not say
    frames: int  # 0 when the container does not say
    codec: str

    @property
    def duration_s(self) -> float:
        return self.frames / self.fps if self.fps > 0 and self.frames > 0 else 0.0


@dataclass(frozen=True)
class FrameChunk:
    """Consecutive sampled frames: their indices in the video, timestamps and tensors."""

    indices: npt.NDArray[np.int64]  # [k]
    timestamps: npt.NDArray[np.float64]  # [k], seconds from the start
    tensors: npt.NDArray[np.uint8]  # [k, 3, crop, crop]

    def __len__(self) -> int:
        return int(self.indices.shape[0])


class Sampler:
    """Decides, frame by frame, which to keep; timestamps make ``fps`` robust to variable rates."""

    def __init__(self, sampling: Sampling) -> None:
        self.sampling = sampling
        self.taken = 0
        self._last_slot = -1

    @property
    def done(self) -> bool:
        return self.taken >= self.sampling.max_samples

    def take(self, index: int, timestamp: float) -> bool:
        if self.done:
            return False
        if self.sampling.every_n:
            keep = index % self.sampling.every_n == 0
        else:
            slot = math.floor(timestamp * self.sampling.fps + 1e-6)
            keep = slot > self._last_slot
            if keep:
                self._last_slot = slot
        self.taken += keep
        return keep


def plan(header: VideoHeader, sampling: Sampling) -> list[int]:
    """Sampled frame indices from the header alone (constant frame rate assumed)."""
    if header.frames <= 0 or header.fps <= 0:
        raise ValueError("the container states no frame count or rate")
    sampler = Sampler(sampling)
    return [i for i in range(header.frames) if sampler.take(i, i / header.fps)]


def check_size(data: bytes, limits: VideoLimits) -> None:
    if not data:
        raise DecodeError("empty", "empty video: 0 bytes received")
    if len(data) > limits.max_bytes:
        raise DecodeError(
            "too_large",
            f"video is {len(data)} bytes; the limit (max_video_bytes) is {limits.max_bytes}",
        )


def container(data: bytes) -> str | None:
    """``"mp4"`` (ISO BMFF: mp4, mov) or ``"matroska"`` (mkv, webm) from the first bytes."""
    if data[4:8] in (b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip"):
        return "mp4"
    if data[:4] == b"\x1a\x45\xdf\xa3":  # EBML
        return "matroska"
    return None


def check_header(header: VideoHeader, limits: VideoLimits) -> None:
    """Refuse, before decoding, what the container header says is over the limits."""
    pixels = header.width * header.height
    if pixels <= 0:
        raise DecodeError("empty", "the video stream has no frame size")
    if pixels > limits.max_pixels:
        raise DecodeError(
            "too_many_pixels",
            f"video frames are {header.width}x{header.height} = {pixels} pixels; "
            f"the limit (max_video_pixels) is {limits.max_pixels}",
        )
    if header.frames > limits.max_frames:
        raise DecodeError(
            "too_many_frames",
            f"video has {header.frames} frames; the limit (max_video_frames) is "
            f"{limits.max_frames}",
        )
    if header.duration_s > limits.max_duration_s:
        raise DecodeError(
            "too_long",
            f"video lasts {header.duration_s:.1f} s; the limit (max_video_duration_s) is "
            f"{limits.max_duration_s:g}",
        )


def _fourcc(value: float) -> str:
    code = int(value)
    text = "".join(chr((code >> (8 * i)) & 0xFF) for i in range(4))
    return text if text.isprintable() else f"0x{code:08x}"


class _MemoryStream(io.BytesIO):
    """A video in memory, as OpenCV's FFmpeg reads it: a seek it cannot do answers -1 (FFmpeg's
    "cannot") instead of raising. OpenCV 4.11 crashes the process on an exception from the
    stream's seek, and it passes FFmpeg's 64-bit offsets through a C int, so a far offset in a
    malformed mp4 arrives negative, which BytesIO refuses with ValueError."""

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        try:
            return super().seek(offset, whence)
        except (ValueError, OverflowError):
            return -1


def open_capture(source: VideoSource, limits: VideoLimits) -> tuple[cv2.VideoCapture, VideoHeader]:
    """Open ``source`` with FFmpeg and check its header: a whole video in memory, or an upload
    (opened once its header has arrived; raises the upload's failure, if it failed).

    Free the capture by dropping it, never with ``release()`` (see :meth:`CpuVideoReader.close`).
    """
    stream: io.BufferedIOBase
    if isinstance(source, UploadStream):
        head, stream, params = source.head(16), source, NO_TIMEOUTS
        if not head:
            raise DecodeError("empty", "empty video: 0 bytes received")
    else:
        check_size(source, limits)
        head, stream, params = source[:16], _MemoryStream(source), []
    # Only these containers reach FFmpeg: its many other demuxers (images, playlists, raw
    # streams) are attack surface that a video endpoint does not need.
    if container(head) is None:
        raise DecodeError(
            "unrecognised",
            f"not a recognised video (expected {CONTAINERS}); first bytes: {head!r}",
        )
    # OpenCV >= 4.10 reads a Python binary stream; its stubs only list IStreamReader.
    capture = cv2.VideoCapture(stream, cv2.CAP_FFMPEG, params)  # type: ignore[call-overload]
    if not capture.isOpened():
        _check(source)
        raise DecodeError(
            "unrecognised",
            f"not a recognised video (expected {CONTAINERS}); first bytes: {head!r}",
        )
    fps = capture.get(cv2.CAP_PROP_FPS)
    frames = capture.get(cv2.CAP_PROP_FRAME_COUNT)
    header = VideoHeader(
        width=int(capture.get(cv2.CAP_PROP_FRAME_WIDTH)),
        height=int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT)),
        fps=fps if math.isfinite(fps) and fps > 0 else 0.0,
        frames=int(frames) if math.isfinite(frames) and frames > 0 else 0,
        codec=_fourcc(capture.get(cv2.CAP_PROP_FOURCC)),
    )
    check_header(header, limits)  # on failure the capture is dropped, which frees it
    return capture, header


def _check(source: VideoSource) -> None:
    """Raise an upload's failure: FFmpeg read it as the end of the video."""
    if isinstance(source, UploadStream):
        source.check()


def probe_video(data: bytes, limits: VideoLimits) -> VideoHeader:
    _, header = open_capture(data, limits)
    return header


_CLOSED = cv2.VideoCapture()  # what a closed reader holds: grab() is False


class CpuVideoReader:
    """Decodes every frame with OpenCV (FFmpeg), keeps the sampled ones, ``chunk`` at a time.

    ``source`` is a whole video, or an upload that is decoded as it arrives: a read waits for
    the upload, and a failed upload raises its failure rather than ending the video. Not
    thread-safe; one caller at a time (the service runs it on a worker thread).
    """

    backend = "opencv"

    def __init__(
        self,
        source: VideoSource,
        sampling: Sampling,
        geometry: Geometry,
        limits: VideoLimits,
        chunk: int = 16,
    ) -> None:
        self.source = source
        self.capture, self.header = open_capture(source, limits)
        self.sampler = Sampler(sampling)
        self.geometry, self.limits, self.chunk = geometry, limits, chunk
        self.index = -1  # of the last frame decoded

    def frames(self) -> Iterator[FrameChunk]:
        while (chunk := self.read_chunk()) is not None:
            yield chunk

    def read_chunk(self) -> FrameChunk | None:
        """The next chunk of sampled frames, or None once the video (or the sampling) is done."""
        try:
            return self._read_chunk()
        except DecodeError:
            _check(self.source)  # a failed upload is why, not the video
            raise

    def _read_chunk(self) -> FrameChunk | None:
        indices: list[int] = []
        stamps: list[float] = []
        tensors: list[npt.NDArray[np.uint8]] = []
        while len(indices) < self.chunk and not self.sampler.done and self.capture.grab():
            self.index += 1
            timestamp = max(self.capture.get(cv2.CAP_PROP_POS_MSEC), 0.0) / 1000.0
            self._check_progress(timestamp)
            if not self.sampler.take(self.index, timestamp):
                continue
            ok, bgr = self.capture.retrieve()
            if not ok or bgr is None:
                raise DecodeError("corrupt", f"video frame {self.index} could not be decoded")
            rgb = np.asarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), dtype=np.uint8)
            indices.append(self.index)
            stamps.append(timestamp)
            tensors.append(resize_crop(rgb, self.geometry))
        _check(self.source)  # FFmpeg reads a failed upload as the video's end
        if not indices:
            if self.index < 0:
                raise DecodeError("corrupt", "video: not one frame could be decoded")
            return None
        return FrameChunk(
            np.array(indices, dtype=np.int64), np.array(stamps, dtype=np.float64), np.stack(tensors)
        )

    def _check_progress(self, timestamp: float) -> None:
        """The limits again, against what decoding finds rather than what the header said."""
        if self.index >= self.limits.max_frames:
            raise DecodeError(
                "too_many_frames",
                f"video has more than {self.limits.max_frames} frames; the limit "
                f"(max_video_frames) is {self.limits.max_frames}",
            )
        if timestamp > self.limits.max_duration_s:
            raise DecodeError(
                "too_long",
                f"video runs past {self.limits.max_duration_s:g} s; the limit "
                f"(max_video_duration_s) is {self.limits.max_duration_s:g}",
            )

    def close(self) -> None:
        # An upload is released first (its spool deleted, reads answer its end at once), so
        # nothing FFmpeg does while the capture is freed can wait for a sender.
        if isinstance(self.source, UploadStream):
            self.source.release()
        # Dropping the last reference frees the capture. Never call release() on a capture
        # that reads a Python stream: OpenCV 4.11 then calls back into Python without the GIL
        # and crashes the process.
        self.capture = _CLOSED
