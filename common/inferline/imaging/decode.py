"""Image decoding to the model's input tensor, on the CPU with OpenCV. No gRPC here.

Every image becomes ``uint8 [3, crop, crop]`` RGB: the shorter side scaled to ``resize``, then a
centre crop. Limits are enforced from the header *before* any pixel is decoded, so a
decompression bomb costs a few hundred bytes of parsing, not gigabytes of memory.

The pixel limit is a budget on what is *decoded*, counted the way the decoder decodes: a
sequential JPEG (every camera's) decodes at 1/2, 1/4 or 1/8 scale in the DCT domain, one row of
blocks at a time, so a 200-megapixel photo costs its 3-megapixel reduction; a progressive or
multi-scan JPEG holds every DCT coefficient of the full image until its last scan, and PNG,
WebP, BMP and GIF have no reduced decode, so those cost their full size.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass

import cv2
import numpy as np
import numpy.typing as npt
from PIL import Image, UnidentifiedImageError

from inferline import capacity

# We enforce our own pixel limit (Limits.max_pixels) from the header before decoding; Pillow's
# global bomb check would otherwise refuse to even report a large header's size.
Image.MAX_IMAGE_PIXELS = None

FORMATS = ("JPEG", "PNG", "WEBP", "BMP", "GIF")
# OpenCV's decoders take no image with a side longer than this (CV_IO_MAX_IMAGE_WIDTH and
# _HEIGHT), however few its pixels: a 1572864 x 16 BMP is within max_pixels.
MAX_SIDE = 1 << 20

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
    """Per image: its encoded size, and the decoded-pixel budget (see the module's docstring).

    40 MP decoded at full size is a large PNG and far below a bomb; at 1/8 scale it is a JPEG of
    up to 2.56 gigapixels, so every camera's photo (45-200 MP) passes while a header claiming
    65000x65000 (66 MP even at 1/8) is refused.
    """

    max_bytes: int = capacity.MAX_IMAGE_BYTES
    max_pixels: int = 40_000_000


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
    # JPEG only: how the frame is coded, which decides what a reduced decode saves. "sequential"
    # (every camera's: one scan of all components, decoded a row of blocks at a time),
    # "multi-scan" (sequential, components in separate scans), "progressive", "lossless",
    # "hierarchical"; "" when the header was read by Pillow (counted at full size).
    coding: str = ""

    @property
    def pixels(self) -> int:
        return self.width * self.height

    @property
    def scalable(self) -> bool:
        """Decoded at 1/``scale`` in 1/``scale``² of the memory: a sequential JPEG in one scan.
        A multi-scan or progressive JPEG keeps every DCT coefficient of the full image (2 bytes
        each) until its last scan, whatever the output's scale."""
        return self.format == "JPEG" and self.coding == "sequential"

    def decoded_size(self, scale: int) -> tuple[int, int]:
        """Width and height of what a decoder holds for this image decoded at 1/``scale``
        (libjpeg rounds up); the full size unless the image is :attr:`scalable`."""
        if not self.scalable:
            return self.width, self.height
        return -(-self.width // scale), -(-self.height // scale)


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
    """Read format, size and coding from the header alone, and refuse an image that is empty,
    over ``max_bytes``, unsupported or truncated. The pixel budget depends on how the image
    will be decoded: :func:`check_pixels`, before decoding."""
    check_size(data, limits)
    header = _jpeg_header(data) or _gif_header(data) or _pillow_header(data)
    if header.format not in FORMATS:
        raise DecodeError(
            "unsupported", f"{header.format} images are not supported; use {', '.join(FORMATS)}"
        )
    if header.pixels == 0:
        raise DecodeError("empty", f"{header.format} header claims an empty image")
    _check_complete(data, header.format)
    return header


def check_pixels(header: Header, scale: int, limits: Limits) -> None:
    """Refuse an image whose decode at 1/``scale`` (1: full size) would hold more pixels than
    the budget (``max_pixels``), or with a side longer than the decoders take (:data:`MAX_SIDE`),
    before a pixel of it is decoded."""
    if max(header.width, header.height) > MAX_SIDE:
        raise DecodeError(
            "too_many_pixels",
            f"{header.format} header claims {header.width}x{header.height}: a side longer than "
            f"{MAX_SIDE} pixels, which no decoder here takes",
        )
    width, height = header.decoded_size(scale)
    decoded = width * height
    if decoded <= limits.max_pixels:
        return
    claim = f"{header.width}x{header.height}"
    special = header.format == "JPEG" and header.coding not in ("", "sequential")
    if decoded < header.pixels:
        what = f"{claim} pixels, {width}x{height} = {decoded} decoded at 1/{scale} scale"
    elif special and scale > 1:  # could have been scaled but for its coding
        what = (
            f"{claim} = {decoded} pixels, all of them held while decoding: a {header.coding} "
            "JPEG keeps every DCT coefficient of the full image until its last scan"
        )
    else:
        what = f"{claim} = {decoded} pixels"
    label = f"{header.coding} JPEG" if special else header.format
    raise DecodeError(
        "too_many_pixels",
        f"{label} header claims {what}; the limit (max_pixels) is {limits.max_pixels}",
    )


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


# Start-of-frame markers by coding process (ITU-T T.81, B.1.1.3), Huffman or arithmetic.
_CODING = {
    **dict.fromkeys((0xC0, 0xC1, 0xC9), "sequential"),
    **dict.fromkeys((0xC2, 0xCA), "progressive"),
    **dict.fromkeys((0xC3, 0xCB), "lossless"),
    **dict.fromkeys((0xC5, 0xC6, 0xC7, 0xCD, 0xCE, 0xCF), "hierarchical"),
}


def _jpeg_header(data: bytes) -> Header | None:
    """A JPEG's size and coding from its frame header and first scan header, walking segment
    lengths: the fast path for the commonest format (Pillow's parser reads every APP segment,
    ~10x slower). None when this is not a JPEG with a readable frame header; Pillow then has
    its say."""
    if not data.startswith(b"\xff\xd8\xff"):
        return None
    frame: Header | None = None
    components = 0
    offset = 2
    while offset + 10 <= len(data):
        if data[offset] != 0xFF:
            break
        marker = data[offset + 1]
        if marker == 0xFF:
            offset += 1
        elif 0xD0 <= marker <= 0xD7 or marker == 0x01:
            offset += 2
        elif marker in _CODING and frame is None:
            height = int.from_bytes(data[offset + 5 : offset + 7], "big")
            width = int.from_bytes(data[offset + 7 : offset + 9], "big")
            frame, components = Header("JPEG", width, height, _CODING[marker]), data[offset + 9]
            offset += 2 + int.from_bytes(data[offset + 2 : offset + 4], "big")
        elif marker == 0xDA:  # the first scan: libjpeg buffers the whole image unless it
            # carries every component of a sequential frame
            if frame is not None and frame.coding == "sequential" and data[offset + 4] < components:
                frame = Header("JPEG", frame.width, frame.height, "multi-scan")
            break
        else:
            offset += 2 + int.from_bytes(data[offset + 2 : offset + 4], "big")
    return frame


def _gif_header(data: bytes) -> Header | None:
    """A GIF's size as Pillow will decode its first frame: the logical screen, grown to the
    first image descriptor's extent. Pillow's own open allocates that frame's background before
    anyone can see its size (a 60-byte GIF claiming 30000x30000 made it touch 900 MB), so the
    pixel budget must be checked first, on the descriptor Pillow will read: this walks the blocks
    the way ``GifImagePlugin`` reads them, quirks included (it skips bytes it does not know, and
    after an extension whose first data sub-block is empty it reads one more run of sub-blocks),
    not as the GIF89a spec (sections 18-23) says. None when this is not a GIF."""
    if not data.startswith((b"GIF87a", b"GIF89a")) or len(data) < 13:
        return None

    def sub_block(at: int) -> tuple[bytes | None, int]:  # GifImageFile.data()
        if at < len(data) and data[at]:
            end = at + 1 + data[at]
            return data[at + 1 : end], end
        return None, at + 1

    width, height = int.from_bytes(data[6:8], "little"), int.from_bytes(data[8:10], "little")
    flags = data[10]
    at = 13 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0)
    while at < len(data) and data[at] != 0x3B:  # the trailer
        block, at = data[at], at + 1
        if block == 0x2C:  # image descriptor: left, top, width, height
            if at + 9 > len(data):
                break
            left, top, frame_width, frame_height = struct.unpack_from("<4H", data, at)
            return Header("GIF", max(width, left + frame_width), max(height, top + frame_height))
        if block != 0x21:  # not an extension either: Pillow skips the byte
            continue
        label, at = data[at : at + 1], at + 1
        first, at = sub_block(at)
        if label == b"\xfe":  # a comment: its sub-blocks up to the empty one, no further
            while first:
                first, at = sub_block(at)
            continue
        if label == b"\xff" and first is not None and first.startswith(b"NETSCAPE2.0"):
            _, at = sub_block(at)  # the loop count
        while True:  # then sub-blocks up to an empty one, even if one already was
            rest, at = sub_block(at)
            if not rest:
                break
    raise DecodeError("truncated", "truncated GIF: no image descriptor before its end")


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


def dct_scale(header: Header, geometry: Geometry) -> int:
    """The JPEG DCT downscale (1, 2, 4 or 8) a JPEG is decoded at: the largest that keeps the
    shorter side >= ``resize``, so the model's input loses nothing. 1 for other formats and for
    JPEGs without DCT (lossless, hierarchical)."""
    if header.format != "JPEG" or header.coding in ("lossless", "hierarchical"):
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


def decode_rgb(data: bytes, header: Header, scale: int = 1) -> npt.NDArray[np.uint8]:
    """Decode to an 8-bit RGB HWC array, a JPEG at 1/``scale``: EXIF orientation applied, alpha
    dropped, 16 bit scaled."""
    if header.format == "GIF":  # OpenCV has no GIF decoder: first frame through Pillow
        try:
            with Image.open(io.BytesIO(data)) as image:
                if image.size != (header.width, header.height):  # before it allocates the frame
                    raise ValueError(
                        f"its blocks give {header.width}x{header.height}, "
                        f"Pillow read {image.width}x{image.height}"
                    )
                return np.asarray(image.convert("RGB"))
        except (OSError, EOFError, SyntaxError, ValueError) as exc:  # truncated, corrupt
            raise DecodeError("corrupt", f"corrupt GIF: {exc}") from None
    flags = _REDUCED[scale]
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
    return decode_probed(data, probe(data, limits), geometry, limits)


def decode_probed(data: bytes, header: Header, geometry: Geometry, limits: Limits) -> Tensor:
    """:func:`decode_image` for an image already probed: a JPEG at its DCT scale, once its
    decoded size is within the pixel budget."""
    scale = dct_scale(header, geometry)
    check_pixels(header, scale, limits)
    return resize_crop(decode_rgb(data, header, scale), geometry)
