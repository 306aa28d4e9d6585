"""Image decoding to the model's input tensor, on the CPU with OpenCV. No gRPC here.

Every image becomes ``uint8 [3, crop, crop]`` RGB: the shorter side scaled to ``resize``, then a
centre crop. Limits are enforced from the header *before* any pixel is decoded, so a
decompression bomb costs a few hundred bytes of parsing, not gigabytes of memory.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt
from PIL import Image, UnidentifiedImageError

# We enforce our own pixel limit (Limits.max_pixels) from the header before decoding; Pillow's
# global bomb check would otherwise refuse to even report a large header's size.
Image.MAX_IMAGE_PIXELS = None

FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "GIF")

Tensor = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class Geometry:
    resize: int = 256  # shorter side, before the crop
    crop: int = 224

    def __post_init__(self) -> None:
        if not 0 < self.crop <= self.resize:
            raise ValueError(f"crop ({self.crop}) must be positive and <= resize ({self.resize})")


@dataclass(frozen=True)
class Limits:
    max_bytes: int = 16 * 1024 * 1024
    max_pixels: int = 40_000_000  # 40 MP: larger than any phone photo, far below a bomb


class DecodeError(ValueError):
    """An image cannot be decoded; ``kind`` labels the metric, the message is for a person."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class Header:
    format: str
    width: int
    height: int


def check_size(data: bytes, limits: Limits) -> None:
    """Refuse an empty or over-sized image before anything else looks at it."""
    if not data:
        raise DecodeError("empty", "empty image: 0 bytes received")
    if len(data) > limits.max_bytes:
        raise DecodeError(
            "too_large",
            f"image is {len(data)} bytes; the limit (max_bytes) is {limits.max_bytes}",
        )


def probe(data: bytes, limits: Limits) -> Header:
    """Read format and size from the header alone, and refuse what the limits forbid."""
    check_size(data, limits)
    header = _jpeg_header(data) or _pillow_header(data)
    if header.format not in FORMATS:
        raise DecodeError(
            "unsupported", f"{header.format} images are not supported; use {', '.join(FORMATS)}"
        )
    pixels = header.width * header.height
    if pixels > limits.max_pixels:
        raise DecodeError(
            "too_many_pixels",
            f"{header.format} header claims {header.width}x{header.height} = {pixels} pixels; "
            f"the limit (max_pixels) is {limits.max_pixels}",
        )
    if pixels == 0:
        raise DecodeError("empty", f"{header.format} header claims an empty image")
    _check_complete(data, header.format)
    return header


def _pillow_header(data: bytes) -> Header:
    try:
        with Image.open(io.BytesIO(data)) as image:
            return Header(image.format or "", image.width, image.height)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        start = data[:16]
        raise DecodeError(
            "unrecognised",
            f"not a recognised image (expected {', '.join(FORMATS)}); first bytes: {start!r}",
        ) from None


# Start-of-frame markers (baseline, extended, progressive, lossless; Huffman or arithmetic).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_header(data: bytes) -> Header | None:
    """A JPEG's size from its frame header, walking segment lengths: the fast path for the
    commonest format (Pillow's parser reads every APP segment, ~10x slower). None when this
    is not a JPEG with a readable frame header; Pillow then has its say."""
    if not data.startswith(b"\xff\xd8\xff"):
        return None
    offset = 2
    while offset + 9 <= len(data):
        if data[offset] != 0xFF:
            return None
        marker = data[offset + 1]
        if marker == 0xFF:
            offset += 1
        elif 0xD0 <= marker <= 0xD7 or marker == 0x01:
            offset += 2
        elif marker in _SOF:
            height = int.from_bytes(data[offset + 5 : offset + 7], "big")
            width = int.from_bytes(data[offset + 7 : offset + 9], "big")
            return Header("JPEG", width, height)
        elif marker == 0xDA:  # a scan before any frame header
            return None
        else:
            offset += 2 + int.from_bytes(data[offset + 2 : offset + 4], "big")
    return None


def _check_complete(data: bytes, fmt: str) -> None:
    """Refuse truncated files, which decoders would otherwise fill with grey."""
    if fmt == "JPEG":
        sos = _jpeg_first_scan(data)
        if sos < 0 or data.rfind(b"\xff\xd9") < sos:
            raise DecodeError("truncated", "truncated JPEG: the end-of-image marker is missing")
    elif fmt == "PNG" and data.rfind(b"IEND") < 0:
        raise DecodeError("truncated", "truncated PNG: the IEND chunk is missing")


def _jpeg_first_scan(data: bytes) -> int:
    """Offset of the main image's first start-of-scan marker, walking segment lengths."""
    offset = 2  # after SOI
    while offset + 4 <= len(data):
        if data[offset] != 0xFF:
            return -1
        marker = data[offset + 1]
        if marker == 0xFF:  # fill byte
            offset += 1
            continue
        if marker == 0xDA:
            return offset
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:
            offset += 2
            continue
        offset += 2 + int.from_bytes(data[offset + 2 : offset + 4], "big")
    return -1


def _reduction(header: Header, geometry: Geometry) -> int:
    """The largest JPEG DCT downscale (1, 2, 4, 8) that keeps the shorter side >= resize."""
    if header.format != "JPEG":
        return 1
    shorter = min(header.width, header.height)
    for factor in (8, 4, 2):
        if shorter // factor >= geometry.resize:
            return factor
    return 1


_REDUCED = {
    1: cv2.IMREAD_COLOR,
    2: cv2.IMREAD_REDUCED_COLOR_2,
    4: cv2.IMREAD_REDUCED_COLOR_4,
    8: cv2.IMREAD_REDUCED_COLOR_8,
}


def decode_rgb(data: bytes, header: Header, geometry: Geometry) -> npt.NDArray[np.uint8]:
    """Decode to an 8-bit RGB HWC array: EXIF orientation applied, alpha dropped, 16 bit scaled."""
    if header.format == "GIF":  # OpenCV has no GIF decoder: first frame through Pillow
        try:
            with Image.open(io.BytesIO(data)) as image:
                image.seek(0)
                return np.asarray(image.convert("RGB"))
        except (OSError, EOFError, SyntaxError, ValueError) as exc:  # truncated, corrupt
            raise DecodeError("corrupt", f"corrupt GIF: {exc}") from None
    flags = _REDUCED[_reduction(header, geometry)]
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    if bgr is None:
        raise DecodeError("corrupt", f"corrupt {header.format}: the decoder could not read it")
    return np.asarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), dtype=np.uint8)


def shrink(rgb: npt.NDArray[np.uint8], geometry: Geometry) -> npt.NDArray[np.uint8]:
    """Area-average by the largest power of two that keeps the shorter side >= ``resize``.

    The pixel-domain twin of JPEG DCT downscaling, for large PNG/WebP images and video frames:
    the bilinear warp that follows then never scales by less than 1/2, so it does not alias.
    """
    height, width = rgb.shape[:2]
    factor = 1
    while min(height, width) // (factor * 2) >= geometry.resize:
        factor *= 2
    if factor == 1:
        return rgb
    size = (width // factor, height // factor)
    return np.asarray(cv2.resize(rgb, size, interpolation=cv2.INTER_AREA), dtype=np.uint8)


# OpenCV's warp takes no image with a side of SHRT_MAX (32767) pixels or more; a 40000 x 100
# strip is well within max_pixels.
_MAX_WARP_SIDE = 32766


def _centre_square(rgb: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """The centre square of a long strip, which holds the crop, with two pixels either side for
    the interpolation: cut from the long side, about the same centre exactly (a view)."""
    height, width = rgb.shape[:2]
    long = max(height, width)
    keep = min(height, width) + 4
    keep += (long - keep) % 2  # the same parity: the cut's centre is the image's
    start = (long - keep) // 2
    return rgb[start : start + keep] if height > width else rgb[:, start : start + keep]


def resize_crop(rgb: npt.NDArray[np.uint8], geometry: Geometry) -> Tensor:
    """Shorter side to ``resize``, centre crop ``crop``, as CHW: one exact affine warp."""
    rgb = shrink(rgb, geometry)
    if max(rgb.shape[:2]) > _MAX_WARP_SIDE:
        rgb = _centre_square(rgb)
    height, width = rgb.shape[:2]
    scale = geometry.resize / min(height, width)
    # Map output pixel centres to source pixel centres: x_src = (x_out + 0.5 + off) / scale - 0.5
    off_x = (width * scale - geometry.crop) / 2
    off_y = (height * scale - geometry.crop) / 2
    inv = 1.0 / scale
    matrix = np.array(
        [[inv, 0.0, (0.5 + off_x) * inv - 0.5], [0.0, inv, (0.5 + off_y) * inv - 0.5]],
        dtype=np.float64,
    )
    out = cv2.warpAffine(
        rgb,
        matrix,
        (geometry.crop, geometry.crop),
        flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
        borderMode=cv2.BORDER_REPLICATE,
    )
    return np.ascontiguousarray(out.transpose(2, 0, 1))


def decode_image(data: bytes, geometry: Geometry, limits: Limits) -> Tensor:
    """Encoded image bytes -> ``uint8 [3, crop, crop]``; raises DecodeError for bad input."""
    header = probe(data, limits)
    return resize_crop(decode_rgb(data, header, geometry), geometry)
