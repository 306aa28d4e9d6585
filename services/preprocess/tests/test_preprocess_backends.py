"""The backends side by side: same geometry, DALI-CPU and OpenCV agree, bad images stay alone."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from inferline.imaging.decode import Geometry, Limits, decode_image
from inferline.imaging.video import VideoLimits
from inferline_testing import media
from preprocess.backends import BackendSettings, Decoded, split
from preprocess.choice import BackendUnavailable, Machine, choose
from preprocess.dali import DaliImageBackend
from preprocess.opencv import OpenCVBackend

# DALI-CPU against OpenCV: mean absolute difference per pixel (0-255 levels), per image.
# Measured 0.65-1.7: both map the same centre square; they differ in resampling (DALI
# antialiases every downscale, OpenCV area-shrinks only by powers of two, or DCT-scales JPEGs).
TOLERANCE = 3.0

GEOMETRY, LIMITS = Geometry(), Limits()


def settings(geometry: Geometry = GEOMETRY, workers: int = 2) -> BackendSettings:
    return BackendSettings(geometry, LIMITS, VideoLimits(), workers=workers, max_batch=16)


@pytest.fixture(scope="module")
def dali_cpu() -> Iterator[DaliImageBackend]:
    backend = DaliImageBackend(settings(), gpu=False)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def opencv() -> Iterator[OpenCVBackend]:
    backend = OpenCVBackend(GEOMETRY, LIMITS, 2)
    yield backend
    backend.close()


def sized(name: str, width: int, height: int) -> bytes:
    return media.encode(media.photo_at(name, width, height), "JPEG", quality=90)


AGREEMENT: dict[str, bytes] = {
    **{f"{n}_640x480": sized(n, 640, 480) for n in ("chelsea", "coffee", "astronaut")},
    **{f"{n}_1920x1080": sized(n, 1920, 1080) for n in ("chelsea", "coffee", "astronaut")},
    "portrait_480x640": sized("coffee", 480, 640),
    **{name: make() for name, make in media.UNUSUAL.items()},
}


def decode(backend: DaliImageBackend | OpenCVBackend, images: list[bytes]) -> Decoded:
    return asyncio.run(backend.decode(images))


@pytest.mark.parametrize(
    ("requested", "machine", "chosen"),
    [
        ("auto", Machine(dali=True, gpus=1), "dali-gpu"),
        ("auto", Machine(dali=True, gpus=0), "opencv"),  # faster than DALI's CPU decoders
        ("auto", Machine(dali=False, gpus=2), "opencv"),
        ("opencv", Machine(dali=True, gpus=1), "opencv"),
        ("dali-cpu", Machine(dali=True, gpus=1), "dali-cpu"),
    ],
)
def test_auto_takes_the_best_this_machine_has(
    requested: str, machine: Machine, chosen: str
) -> None:
    assert choose(requested, machine) == chosen


@pytest.mark.parametrize(
    ("requested", "machine", "words"),
    [
        ("dali-gpu", Machine(dali=True, gpus=0), "needs a CUDA GPU"),
        ("dali-cpu", Machine(dali=False, gpus=0), "needs NVIDIA DALI"),
    ],
)
def test_an_impossible_backend_fails_with_a_reason(
    requested: str, machine: Machine, words: str
) -> None:
    with pytest.raises(BackendUnavailable, match=words):
        choose(requested, machine)


def test_split_covers_everything_in_order() -> None:
    assert split(5, 2) == [(0, 3), (3, 5)]
    assert split(1, 4) == [(0, 1)]
    assert split(8, 4) == [(0, 2), (2, 4), (4, 6), (6, 8)]


def test_dali_cpu_agrees_with_opencv(dali_cpu: DaliImageBackend, opencv: OpenCVBackend) -> None:
    images = list(AGREEMENT.values())
    ours, theirs = decode(dali_cpu, images), decode(opencv, images)
    assert ours.errors == theirs.errors == [None] * len(images)
    assert ours.tensors.shape == theirs.tensors.shape == (len(images), 3, 224, 224)
    diff = np.abs(ours.tensors.astype(np.float32) - theirs.tensors.astype(np.float32))
    per_image = dict(zip(AGREEMENT, diff.mean(axis=(1, 2, 3)).round(2), strict=True))
    assert max(per_image.values()) < TOLERANCE, per_image


def test_every_backend_gives_the_configured_geometry() -> None:
    geometry = Geometry(320, 288)
    images = [AGREEMENT["coffee_1920x1080"], AGREEMENT["portrait_480x640"]]
    dali = DaliImageBackend(settings(geometry, workers=1), gpu=False)
    cv = OpenCVBackend(geometry, LIMITS, 1)
    try:
        for backend in (dali, cv):
            assert decode(backend, images).tensors.shape == (2, 3, 288, 288)
    finally:
        dali.close()
        cv.close()


BAD = {
    "truncated": (media.truncated_jpeg, "truncated"),
    "bomb": (media.png_bomb, "too_many_pixels"),
    "text": (lambda: b"not an image", "unrecognised"),
    "corrupt_png": (media.corrupt_png, "corrupt"),  # passes the header checks; DALI fails
}


@pytest.mark.parametrize("backend_name", ["dali_cpu", "opencv"])
def test_bad_images_never_fail_their_batch_mates(
    backend_name: str, request: pytest.FixtureRequest
) -> None:
    backend = request.getfixturevalue(backend_name)
    good = [media.cat_jpeg(), media.UNUSUAL["gif_first_frame"](), AGREEMENT["coffee_640x480"]]
    bad = [make() for make, _ in BAD.values()]
    batch = [good[0], bad[0], good[1], bad[1], bad[2], good[2], bad[3], good[0]]
    out = decode(backend, batch)
    kinds = [e.kind if e else None for e in out.errors]
    assert kinds == [None, "truncated", None, "too_many_pixels", "unrecognised", None,
                     "corrupt", None]  # fmt: skip
    alone = decode(backend, good)
    np.testing.assert_array_equal(out.tensors[[0, 2, 5]], alone.tensors)
    assert not out.tensors[[1, 3, 4, 6]].any()  # refused rows are zeros
    # And the backend still works afterwards (DALI rebuilt the pipeline that failed).
    assert decode(backend, good).errors == [None] * 3


# Photos as current cameras write them (media.camera_jpeg), over the budget at full size.
CAMERAS = {"50mp": (8160, 6120), "200mp": (16320, 12240)}


@pytest.mark.parametrize("backend_name", ["dali_cpu", "opencv"])
def test_camera_photos_pass_every_backend(
    backend_name: str, request: pytest.FixtureRequest
) -> None:
    backend = request.getfixturevalue(backend_name)
    photos = [media.camera_jpeg(*size) for size in CAMERAS.values()]
    out = decode(backend, [media.cat_jpeg(), *photos])
    assert out.errors == [None] * (1 + len(photos))
    # DALI has no reduced decode: it hands these to the CPU core, which decodes them at 1/8.
    expected = [decode_image(photo, GEOMETRY, LIMITS) for photo in photos]
    np.testing.assert_array_equal(out.tensors[1:], expected)


def test_dali_hands_what_it_cannot_afford_at_full_size_to_the_cpu_core() -> None:
    limits = Limits(max_pixels=1_000_000)
    small = BackendSettings(GEOMETRY, limits, VideoLimits(), workers=1, max_batch=4)
    dali, cv = DaliImageBackend(small, gpu=False), OpenCVBackend(GEOMETRY, limits, 1)
    big_jpeg = AGREEMENT["coffee_1920x1080"]  # 2 MP at full size, 0.13 MP at 1/4
    big_png = media.encode(media.photo_at("coffee", 1920, 1080), "PNG")  # 2 MP, no reduced decode
    images = [AGREEMENT["coffee_640x480"], big_jpeg, big_png]
    try:
        ours, theirs = decode(dali, images), decode(cv, images)
    finally:
        dali.close()
        cv.close()
    assert ours.errors[:2] == theirs.errors[:2] == [None, None]
    np.testing.assert_array_equal(ours.tensors[1], theirs.tensors[1])  # the same CPU decode
    for errors in (ours.errors, theirs.errors):
        assert str(errors[2]) == (
            "PNG header claims 1920x1080 = 2073600 pixels; the limit (max_pixels) is 1000000"
        )
