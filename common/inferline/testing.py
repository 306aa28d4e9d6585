"""Test material shared by the suites: real photos, unusual-but-valid images and hostile ones.

Everything is generated in memory from photos that ship inside PyPI packages (scikit-image).
"""

from __future__ import annotations

import io
import struct
import zlib
from collections.abc import Callable

import cv2
import numpy as np
import numpy.typing as npt
from PIL import Image

CAT_CLASSES = range(281, 286)  # ImageNet domestic cats: tabby, tiger, Persian, Siamese, Egyptian


def photo(name: str = "chelsea") -> npt.NDArray[np.uint8]:
    """A real RGB photo from scikit-image's bundled data (``chelsea`` is a cat)."""
    from skimage import data

    return np.asarray(getattr(data, name)(), dtype=np.uint8)


def encode(rgb: npt.NDArray[np.uint8], fmt: str = "JPEG", **params: object) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, fmt, **params)
    return buffer.getvalue()


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


def huge_header_jpeg(width: int = 65000, height: int = 65000) -> bytes:
    """A small JPEG whose frame header claims ``width`` x ``height`` pixels."""
    data = bytearray(encode(np.zeros((16, 16, 3), np.uint8), "JPEG"))
    offset = 2
    while data[offset + 1] not in (0xC0, 0xC1, 0xC2):
        offset += 2 + int.from_bytes(data[offset + 2 : offset + 4], "big")
    struct.pack_into(">HH", data, offset + 5, height, width)
    return bytes(data)


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
