"""decode: encoded image bytes -> ``uint8 [3, 224, 224]`` on the CPU, as preprocess's ``opencv``
backend and middleman's in-process decoding run it (:func:`inferline.imaging.decode.decode_image`
with the default geometry and limits).

Besides "DecodeError or a tensor", the header pixel check is held to its promise: the image the
decoder hands back never has more pixels than the header that :func:`~inferline.imaging.decode
.probe` checked against ``max_pixels`` (a decoder that reads a size of its own, past the header's,
would let a decompression bomb through).
"""

from __future__ import annotations

import io
from collections.abc import Callable

import cv2
import numpy as np
import numpy.typing as npt
from PIL import Image

from inferline.imaging import decode
from inferline.imaging.decode import DecodeError, Geometry, Header, Limits

GEOMETRY = Geometry()
LIMITS = Limits()

_decode_rgb = decode.decode_rgb


def checked_decode_rgb(data: bytes, header: Header, scale: int = 1) -> npt.NDArray[np.uint8]:
    """``decode_rgb``, held to the header and the budget: no more pixels than the header claims
    nor than the pixel budget (the decoded pixels: a JPEG at 1/``scale``), 8-bit RGB."""
    rgb = _decode_rgb(data, header, scale)
    assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3, (rgb.dtype, rgb.shape)
    decoded = rgb.shape[0] * rgb.shape[1]
    assert decoded <= header.width * header.height and decoded <= LIMITS.max_pixels, (
        f"{header.format} header says {header.width}x{header.height} (at 1/{scale}); "
        f"the decoder gave {rgb.shape[1]}x{rgb.shape[0]}"
    )
    return rgb


def one_input(data: bytes) -> None:
    try:
        tensor = decode.decode_image(data, GEOMETRY, LIMITS)
    except DecodeError as exc:
        assert exc.kind and str(exc)
        return
    assert tensor.shape == (3, GEOMETRY.crop, GEOMETRY.crop) and tensor.dtype == np.uint8


def setup() -> Callable[[bytes], None]:
    cv2.setNumThreads(1)  # the same work on any machine, and a fair share of a shared one
    Image.init()  # Pillow's format plugins imported now, while atheris instruments imports
    decode.decode_rgb = checked_decode_rgb  # decode_image looks it up on every call
    return one_input


def small_images() -> dict[str, bytes]:
    """Every format and variant the service accepts, as tiny images: quick to decode and to
    mutate."""
    from inferline_testing import media

    rgb = media.photo_at("chelsea", 24, 16)
    gray = np.ascontiguousarray(rgb[:, :, 1])
    rgba = np.dstack([rgb, np.full(rgb.shape[:2], 128, np.uint8)])
    exif = Image.Exif()
    exif[0x0112] = 6
    made = {
        "jpeg": media.encode(rgb, "JPEG", quality=80),
        "jpeg_progressive": media.encode(rgb, "JPEG", progressive=True, quality=80),
        "jpeg_gray": media.encode(gray, "JPEG"),
        "jpeg_exif_rotated": media.encode(rgb, "JPEG", exif=exif.tobytes()),
        "png": media.encode(rgb, "PNG"),
        "png_alpha": media.encode(rgba, "PNG"),
        "png_gray": media.encode(gray, "PNG"),
        "webp_lossy": media.encode(rgb, "WEBP", quality=60),
        "webp_lossless": media.encode(rgb, "WEBP", lossless=True),
        "bmp": media.encode(rgb, "BMP"),
        "gif": media.encode(rgb, "GIF"),
    }
    cmyk = Image.fromarray(rgb).convert("CMYK")
    palette = Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE)
    for name, image, fmt in (("jpeg_cmyk", cmyk, "JPEG"), ("png_palette", palette, "PNG")):
        made[name] = _save(image, fmt)
    ok, png16 = cv2.imencode(".png", rgb.astype(np.uint16) * 257)
    assert ok
    made["png_16bit"] = bytes(png16)
    return made


def _save(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()


def seeds() -> dict[str, bytes]:
    """The test images of :mod:`inferline_testing.media` (real photos, unusual encodings, hostile
    ones), and tiny versions of every variant."""
    from inferline_testing import media

    made = {f"small_{name}": data for name, data in small_images().items()}
    made.update({name: make() for name, make in media.UNUSUAL.items()})
    made["cat_jpeg"] = media.cat_jpeg()
    made["truncated_jpeg"] = media.truncated_jpeg()
    made["huge_header_jpeg"] = media.huge_header_jpeg()
    made["corrupt_png"] = media.corrupt_png()
    made["png_bomb"] = media.png_bomb(7000)  # 49 MP: over max_pixels
    return made
