import numpy as np
import numpy.typing as npt
import pytest

from inferline.imaging.decode import (
    DecodeError,
    Geometry,
    Limits,
    decode_image,
    probe,
    resize_crop,
    shrink,
)
from inferline_testing import media

GEOMETRY, LIMITS = Geometry(), Limits()


@pytest.fixture(scope="module")
def reference() -> npt.NDArray[np.float32]:
    return decode_image(media.cat_jpeg(), GEOMETRY, LIMITS).astype(np.float32)


def test_geometry_is_rgb_chw_uint8(reference: npt.NDArray[np.float32]) -> None:
    tensor = decode_image(media.cat_jpeg(), Geometry(320, 288), LIMITS)
    assert tensor.shape == (3, 288, 288) and tensor.dtype == np.uint8
    # Chelsea is a ginger cat: red dominates blue on average, so the channels are RGB, not BGR.
    assert reference[0].mean() > reference[2].mean() + 10


def test_resize_crop_takes_the_centre() -> None:
    # A 512x256 image whose left and right quarters are white: after scaling the shorter side
    # to 256 and cropping the centre 224, no white may remain.
    image = np.zeros((256, 512, 3), np.uint8)
    image[:, :128] = image[:, 384:] = 255
    assert resize_crop(image, GEOMETRY).max() == 0
    tall = np.zeros((512, 256, 3), np.uint8)
    tall[:128] = 255
    assert resize_crop(tall, GEOMETRY).max() == 0


@pytest.mark.parametrize("name", sorted(media.UNUSUAL))
def test_unusual_images_decode_like_the_original(
    name: str, reference: npt.NDArray[np.float32]
) -> None:
    tensor = decode_image(media.UNUSUAL[name](), GEOMETRY, LIMITS).astype(np.float32)
    assert tensor.shape == (3, 224, 224)
    # Compare luminance (grayscale has no colour); EXIF rotation undone, alpha dropped, 16 bit
    # scaled: all land within a few grey levels of the baseline JPEG.
    assert np.abs(tensor.mean(0) - reference.mean(0)).mean() < 8


@pytest.mark.parametrize(
    ("data", "kind", "words"),
    [
        (b"", "empty", "0 bytes"),
        (b"hello, this is text", "unrecognised", "not a recognised image"),
        (bytes(range(256)) * 8, "unrecognised", "not a recognised image"),
        (media.truncated_jpeg(), "truncated", "truncated JPEG"),
        (media.huge_header_jpeg(), "too_many_pixels", "65000x65000"),
        (media.png_bomb(), "too_many_pixels", "max_pixels"),
    ],
)
def test_bad_input_is_refused_with_a_reason(data: bytes, kind: str, words: str) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_image(data, GEOMETRY, LIMITS)
    assert caught.value.kind == kind
    assert words in str(caught.value)


def test_byte_limit_names_the_limit() -> None:
    data = media.cat_jpeg()
    with pytest.raises(DecodeError, match=r"the limit \(max_bytes\) is 1000"):
        probe(data, Limits(max_bytes=1000))


def test_geometry_validates() -> None:
    with pytest.raises(ValueError, match="crop"):
        Geometry(resize=200, crop=224)


def test_large_images_are_area_shrunk_before_the_warp() -> None:
    # A 1-pixel checkerboard at 2048x2048: a plain bilinear warp to 256 would alias it into
    # stripes; area-averaging first gives flat grey, as a camera would see it.
    board = (np.indices((2048, 2048)).sum(0) % 2 * 255).astype(np.uint8)
    tensor = resize_crop(np.dstack([board] * 3), GEOMETRY)
    assert abs(float(tensor.mean()) - 127.5) < 1 and tensor.std() < 2
    assert shrink(np.zeros((600, 1000, 3), np.uint8), GEOMETRY).shape == (300, 500, 3)
    assert shrink(np.zeros((511, 1000, 3), np.uint8), GEOMETRY).shape == (511, 1000, 3)


def test_corrupt_pixels_behind_a_valid_header_are_refused() -> None:
    with pytest.raises(DecodeError) as caught:
        decode_image(media.corrupt_png(), GEOMETRY, LIMITS)
    assert caught.value.kind == "corrupt"


def test_a_truncated_gif_is_corrupt_not_an_exception_of_pillows() -> None:
    # Found by fuzzing (fuzz/regressions/decode/): Pillow's OSError escaped decode_image, which
    # failed a whole preprocess batch instead of one image's slot.
    gif = media.encode(media.photo_at("chelsea", 40, 30), "GIF")
    with pytest.raises(DecodeError) as caught:
        decode_image(gif[: len(gif) // 2], GEOMETRY, LIMITS)
    assert caught.value.kind == "corrupt"
    assert "corrupt GIF" in str(caught.value)


@pytest.mark.parametrize(("height", "width"), [(64, 40_000), (33_001, 24)])
def test_a_strip_longer_than_opencvs_warp_is_cut_to_its_centre(height: int, width: int) -> None:
    # Found by fuzzing (fuzz/regressions/dali/): a 24 x 64272 GIF is within max_pixels, but
    # cv2.warpAffine asserts every side is under 32767 pixels (cv2.error, a failed batch).
    rng = np.random.default_rng(0)
    strip = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    tensor = resize_crop(strip, GEOMETRY)
    # The same centre, from an image the warp takes whole: the crop samples only its middle.
    window = 3000 + max(height, width) % 2  # centred exactly: the same parity
    if width > height:
        centre = strip[:, (width - window) // 2 : (width + window) // 2]
    else:
        centre = strip[(height - window) // 2 : (height + window) // 2]
    expected = resize_crop(np.ascontiguousarray(centre), GEOMETRY)
    assert np.abs(tensor.astype(int) - expected).max() <= 1
    png = media.encode(strip[:, :, 0], "PNG")  # and end to end, through the decoder
    assert decode_image(png, GEOMETRY, LIMITS).shape == (3, 224, 224)
