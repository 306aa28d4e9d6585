"""Test material shared by the suites: real photos, unusual-but-valid images and hostile ones.

Everything is generated in memory from photos that ship inside PyPI packages (scikit-image).
"""

from __future__ import annotations

import functools
import io
import math
import shutil
import struct
import subprocess
import tempfile
import zlib
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import numpy.typing as npt
from PIL import Image

CAT_CLASSES = range(281, 286)  # ImageNet domestic cats: tabby, tiger, Persian, Siamese, Egyptian


def photo(name: str = "chelsea") -> npt.NDArray[np.uint8]:
    """A real RGB photo from scikit-image's bundled data (``chelsea`` is a cat)."""
    from skimage import data

    return np.asarray(getattr(data, name)(), dtype=np.uint8)


def photo_at(name: str, width: int, height: int) -> npt.NDArray[np.uint8]:
    """A real photo resized to ``width`` x ``height`` (area-averaged down, bicubic up)."""
    rgb = photo(name)
    smaller = width * height < rgb.shape[0] * rgb.shape[1]
    method = cv2.INTER_AREA if smaller else cv2.INTER_CUBIC
    return np.asarray(cv2.resize(rgb, (width, height), interpolation=method), dtype=np.uint8)


def encode(rgb: npt.NDArray[np.uint8], fmt: str = "JPEG", **params: object) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, fmt, **params)
    return buffer.getvalue()


def padded_jpeg(jpeg: bytes, size: int) -> bytes:
    """``jpeg`` made exactly ``size`` bytes long with comment (COM) segments after its SOI
    marker: still a valid JPEG of the same picture, only bigger."""
    pad = size - len(jpeg)
    if pad < 0 or 0 < pad < 4:
        raise ValueError(f"cannot pad {len(jpeg)} bytes to {size}: a segment takes 4 at least")
    segments = []
    while pad:
        body = min(pad - 4, 65533)
        if 0 < pad - 4 - body < 4:  # leave room for a last segment of its own
            body -= 4
        segments.append(b"\xff\xfe" + (body + 2).to_bytes(2, "big") + b"\0" * body)
        pad -= body + 4
    return jpeg[:2] + b"".join(segments) + jpeg[2:]


def cat_jpeg() -> bytes:
    return encode(photo("chelsea"), "JPEG", quality=92)


def _exif_rotated() -> bytes:
    """The cat stored rotated 90° with EXIF orientation 6, so viewers rotate it back."""
    stored = np.ascontiguousarray(np.rot90(photo(), k=1))
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(stored, "JPEG", quality=92, exif=exif.tobytes())


def _png16() -> bytes:
    ok, data = cv2.imencode(
        ".png", cv2.cvtColor(photo(), cv2.COLOR_RGB2BGR).astype(np.uint16) * 257
    )
    assert ok
    return bytes(data)


def _alpha() -> bytes:
    rgba = np.dstack([photo(), np.full(photo().shape[:2], 128, np.uint8)])
    return encode(rgba, "PNG")


def _cmyk() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(photo()).convert("CMYK").save(buffer, "JPEG", quality=92)
    return buffer.getvalue()


def _palette() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(photo()).convert("P", palette=Image.Palette.ADAPTIVE).save(buffer, "PNG")
    return buffer.getvalue()


def _gif() -> bytes:
    buffer = io.BytesIO()
    frames = [Image.fromarray(photo()), Image.fromarray(photo()[::-1].copy())]
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:])
    return buffer.getvalue()


# Valid but unusual encodings of the cat photo: every one must classify as a cat.
UNUSUAL: dict[str, Callable[[], bytes]] = {
    "grayscale_jpeg": lambda: encode(
        np.asarray(cv2.cvtColor(photo(), cv2.COLOR_RGB2GRAY), np.uint8)
    ),
    "progressive_jpeg": lambda: encode(photo(), "JPEG", progressive=True, quality=90),
    "cmyk_jpeg": _cmyk,
    "exif_rotated_jpeg": _exif_rotated,
    "png_16bit": _png16,
    "png_alpha": _alpha,
    "png_palette": _palette,
    "webp": lambda: encode(photo(), "WEBP", quality=90),
    "bmp": lambda: encode(photo(), "BMP"),
    "gif_first_frame": _gif,
}


def truncated_jpeg() -> bytes:
    data = cat_jpeg()
    return data[: len(data) * 2 // 3]


@functools.cache
def camera_jpeg(width: int, height: int) -> bytes:
    """A photo as a high-resolution camera writes it: the cat at ``width`` x ``height`` with
    sensor grain, a sequential (baseline) JPEG at quality 92 with 4:2:0 chroma, as cameras
    write. The grain gives it a real photo's size (16320x12240, 200 MP: ~21 MiB; phones write
    20-55 MB); the cat stays a cat. Cached: 200 MP takes ~1.5 s and ~0.7 GiB to make."""
    small = cv2.cvtColor(photo_at("chelsea", width // 4, height // 4), cv2.COLOR_RGB2BGR)
    bgr = cv2.resize(small, (width, height), interpolation=cv2.INTER_LINEAR)
    tile = np.random.default_rng(0).normal(0.0, 2.0, (1024, 1024)).round()
    up, down = (
        cv2.merge([np.tile(np.clip(t, 0, 255).astype(np.uint8), (1, -(-width // 1024)))] * 3)
        for t in (tile, -tile)
    )
    for top in range(0, height, 1024):  # in bands, in place, saturating: no big temporaries
        band = bgr[top : top + 1024]
        cv2.add(band, up[: len(band), :width], dst=band)
        cv2.subtract(band, down[: len(band), :width], dst=band)
    ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 92])
    assert ok
    return bytes(data)


def huge_header_jpeg(width: int = 65000, height: int = 65000, progressive: bool = False) -> bytes:
    """A small JPEG (sequential, or progressive) whose frame header claims ``width`` x
    ``height`` pixels."""
    data = bytearray(encode(np.zeros((16, 16, 3), np.uint8), "JPEG", progressive=progressive))
    offset = 2
    while data[offset + 1] not in (0xC0, 0xC1, 0xC2):
        offset += 2 + int.from_bytes(data[offset + 2 : offset + 4], "big")
    struct.pack_into(">HH", data, offset + 5, height, width)
    return bytes(data)


def huge_header_webp(side: int = 16384) -> bytes:
    """A small lossless WebP whose header claims ``side`` x ``side`` pixels (at most 16384,
    WebP's largest)."""
    buffer = io.BytesIO()
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(buffer, "WEBP", lossless=True)
    data = bytearray(buffer.getvalue())
    at = data.index(b"VP8L") + 9  # after the chunk header and the 0x2F signature byte
    bits = int.from_bytes(data[at : at + 4], "little")  # 14 bits width - 1, 14 bits height - 1
    bits = bits & ~((1 << 28) - 1) | (side - 1) | (side - 1) << 14
    data[at : at + 4] = bits.to_bytes(4, "little")
    return bytes(data)


def gif_frame_bomb(side: int = 30000) -> bytes:
    """A 1x1 GIF whose first frame claims ``side`` x ``side`` pixels and is disposed to the
    background: Pillow's open allocates and fills that background (found by fuzzing)."""
    gif = io.BytesIO()
    Image.new("P", (1, 1)).save(gif, "GIF", disposal=2)
    data = bytearray(gif.getvalue())
    at = data.index(b"\x2c") + 5  # the image descriptor's width, height (after left, top)
    data[at : at + 4] = struct.pack("<HH", side, side)
    return bytes(data)


def gif_hidden_frame_bomb(side: int = 30000) -> bytes:
    """A GIF whose image descriptor, read as the spec says, is 1x1, while Pillow reads one
    claiming ``side`` x ``side``: after an extension whose first data sub-block is empty,
    Pillow reads one more run of sub-blocks, taking the 1x1 descriptor for one (found by
    fuzzing)."""
    trailer = b"\x00\x02\x02\x4c\x01\x00\x3b"  # no local palette; LZW data; end
    decoy = b"\x2c" + struct.pack("<4H", 0, 0, 1, 1) + trailer
    decoy = decoy.ljust(1 + 0x2C, b"\x00")  # as a sub-block: its 0x2c is the length
    frame = b"\x2c" + struct.pack("<4H", 0, 0, side, side) + trailer
    screen = b"GIF89a" + struct.pack("<HH", 1, 1) + b"\x00\x00\x00"
    empty_extension = b"\x21\xf9\x00"  # a graphic control extension with no data
    return screen + empty_extension + decoy + b"\x00" + frame


def png_bomb(side: int = 12000) -> bytes:
    """A *valid* grayscale PNG of side x side zeros: ~140 KB that inflates to side² bytes."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    compressor = zlib.compressobj(9)
    row = b"\x00" * (side + 1)  # filter byte + pixels
    idat = b"".join(compressor.compress(row) for _ in range(side)) + compressor.flush()
    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
    )


def corrupt_png() -> bytes:
    """The cat as PNG with its compressed pixels scrambled: the header and IEND are intact, so
    only the decoder itself can tell."""
    data = bytearray(encode(photo(), "PNG"))
    start = data.find(b"IDAT") + 4 + 64
    for i in range(start, start + 4096):
        data[i] ^= 0x5A
    return bytes(data)


# -- video ----------------------------------------------------------------------------------

FFMPEG = shutil.which("ffmpeg")

# name -> (container, how it is made); "cv2" needs nothing beyond OpenCV, "ffmpeg" the CLI.
VIDEO_CODECS: dict[str, tuple[str, str]] = {
    "mpeg4_mp4": ("mp4", "cv2:mp4v"),
    "vp9_webm": ("webm", "cv2:VP90"),
    "vp9_mkv": ("mkv", "cv2:VP90"),
    "h264_mp4": ("mp4", "ffmpeg:libx264"),
    "h264_faststart_mp4": ("mp4", "ffmpeg:libx264:faststart"),  # the index (moov) first
    "h265_mkv": ("mkv", "ffmpeg:libx265"),
}
# Which of them a decoder can start before the whole file has arrived: matroska always, an mp4
# whose index comes first when its length is known (FFmpeg asks); an mp4 whose index is at its
# end (mp4v and plain libx264 here) only once the index has arrived.
PROGRESSIVE_CODECS = ("vp9_webm", "vp9_mkv", "h264_faststart_mp4", "h265_mkv")


def video_frames(count: int, width: int = 320, height: int = 240) -> list[npt.NDArray[np.uint8]]:
    """``count`` RGB frames of the cat photo, panning a few pixels per frame."""
    base = np.asarray(cv2.resize(photo(), (width + count * 2, height)), np.uint8)
    return [np.ascontiguousarray(base[:, 2 * i : 2 * i + width]) for i in range(count)]


def make_video(
    codec: str, frames: list[npt.NDArray[np.uint8]] | None = None, fps: float = 10.0
) -> bytes:
    """Encode ``frames`` (default: 30 panning cat frames) as ``codec`` (a VIDEO_CODECS key).

    Raises LookupError when this machine cannot make that codec (no ffmpeg CLI).
    """
    container, how = VIDEO_CODECS[codec]
    tool, name, *options = how.split(":")
    frames = video_frames(30) if frames is None else frames
    height, width = frames[0].shape[:2]
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"video.{container}"
        if tool == "cv2":
            writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*name), fps, (width, height))
            if not writer.isOpened():
                raise LookupError(f"OpenCV cannot write {codec} here")
            for frame in frames:
                writer.write(cv2.cvtColor(frame, cv2.COLOR_RGB2BGR))
            writer.release()
        else:
            if FFMPEG is None:
                raise LookupError(f"{codec} needs the ffmpeg CLI (apt-get install ffmpeg)")
            raw = b"".join(frame.tobytes() for frame in frames)
            command = [
                FFMPEG, "-hide_banner", "-loglevel", "error", "-f", "rawvideo",
                "-pix_fmt", "rgb24", "-s", f"{width}x{height}", "-r", f"{fps:g}", "-i", "-",
                "-c:v", name, "-pix_fmt", "yuv420p", "-x265-params", "log-level=error",
                str(path),
            ]  # fmt: skip
            if name != "libx265":
                command.remove("-x265-params")
                command.remove("log-level=error")
            if "faststart" in options:
                command[-1:-1] = ["-movflags", "+faststart"]
            subprocess.run(command, input=raw, check=True)
        return path.read_bytes()


def large_video(
    min_bytes: int,
    container: str = "mkv",
    width: int = 640,
    height: int = 480,
    fps: float = 10.0,
    min_seconds: float = 10.0,
) -> bytes:
    """A video of at least ``min_bytes`` and ``min_seconds`` (FFmpeg reads up to 5 s of a video
    before its first frame: a shorter one cannot show frames arriving before its end) that
    classifies as a cat: the cat photo panning slowly in the middle (wide enough for the centre
    crop a classifier sees), fresh noise in a strip on each side, lossless H.264 (the noise does
    not compress, so the size is what is asked), in ``container`` (``mkv``, or ``mp4`` with its
    index first). Frames are piped to the ffmpeg CLI one at a time.

    Raises LookupError without the ffmpeg CLI.
    """
    if FFMPEG is None:
        raise LookupError("large_video needs the ffmpeg CLI (apt-get install ffmpeg)")
    noise_px = (width - _middle(width, height)) * height
    frames = math.ceil(min_bytes / (noise_px * 2.0)) + 10  # ~2 B a noise pixel, all told
    frames = max(frames, math.ceil(min_seconds * fps))
    while True:
        data = _large_video(frames, container, width, height, fps)
        if len(data) >= min_bytes:
            return data
        frames = math.ceil(frames * min_bytes / len(data) * 1.1)


def _middle(width: int, height: int) -> int:
    """Columns the cat keeps: the centre crop (224 of the shorter side's 256) of a landscape
    frame spans 7/8 of its height in width; a little more, even."""
    return min(width, 2 * math.ceil(0.45 * height))


def _large_video(frames: int, container: str, width: int, height: int, fps: float) -> bytes:
    assert FFMPEG is not None
    middle = _middle(width, height)
    left = (width - middle) // 2
    cat = photo()
    scaled = cv2.resize(cat, (round(cat.shape[1] * height / cat.shape[0]), height))
    travel = max(scaled.shape[1] - middle, 1)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"video.{container}"
        command = [
            FFMPEG, "-hide_banner", "-loglevel", "error", "-f", "rawvideo", "-pix_fmt", "rgb24",
            "-s", f"{width}x{height}", "-r", f"{fps:g}", "-i", "-", "-c:v", "libx264",
            "-preset", "ultrafast", "-qp", "0", "-pix_fmt", "yuv420p", str(path),
        ]  # fmt: skip
        if container == "mp4":
            command[-1:-1] = ["-movflags", "+faststart"]
        with subprocess.Popen(command, stdin=subprocess.PIPE) as ffmpeg:
            assert ffmpeg.stdin is not None
            for i in range(frames):
                offset = i % (2 * travel)
                offset = offset if offset < travel else 2 * travel - offset  # back and forth
                frame = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
                frame[:, left : left + middle] = scaled[:, offset : offset + middle]
                ffmpeg.stdin.write(frame.tobytes())
            ffmpeg.stdin.close()
        if ffmpeg.returncode:
            raise RuntimeError(f"ffmpeg failed ({ffmpeg.returncode}) making a large video")
        return path.read_bytes()
