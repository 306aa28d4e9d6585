"""Video: sampling, every container and codec this machine can make, limits."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from inferline.imaging.decode import DecodeError, Geometry, Limits, decode_image
from inferline.imaging.video import (
    CpuVideoReader,
    FrameChunk,
    Sampler,
    Sampling,
    VideoHeader,
    VideoLimits,
    plan,
    probe_video,
)
from inferline_testing import media, tools

GEOMETRY = Geometry()
EVERY_5 = Sampling(every_n=5, fps=0, max_samples=100)


@functools.cache
def video(codec: str) -> bytes:
    """30 frames at 10 fps (3 s) of the panning cat; skips the test if this machine can't."""
    with tools.missing_on(LookupError):
        return media.make_video(codec)


def read_all(data: bytes, sampling: Sampling, limits: VideoLimits | None = None) -> FrameChunk:
    reader = CpuVideoReader(data, sampling, GEOMETRY, limits or VideoLimits(), chunk=4)
    chunks = list(reader.frames())
    reader.close()
    assert all(len(c) <= 4 for c in chunks)
    return FrameChunk(
        np.concatenate([c.indices for c in chunks]),
        np.concatenate([c.timestamps for c in chunks]),
        np.concatenate([c.tensors for c in chunks]),
    )


def test_every_nth_frame() -> None:
    sampler = Sampler(Sampling(every_n=3, fps=0, max_samples=100))
    assert [i for i in range(10) if sampler.take(i, i / 30)] == [0, 3, 6, 9]


def test_target_fps_follows_timestamps_even_when_the_rate_varies() -> None:
    sampler = Sampler(Sampling(fps=2.0, every_n=0))
    stamps = [0.0, 0.1, 0.45, 0.5, 0.51, 0.99, 1.0, 2.7, 2.8]  # a gap: 1.0 -> 2.7
    taken = [t for i, t in enumerate(stamps) if sampler.take(i, t)]
    assert taken == [0.0, 0.5, 1.0, 2.7]


def test_the_count_is_capped() -> None:
    sampler = Sampler(Sampling(every_n=1, fps=0, max_samples=3))
    assert sum(sampler.take(i, i) for i in range(10)) == 3 and sampler.done


def test_plan_from_the_header() -> None:
    header = VideoHeader(640, 360, fps=30.0, frames=90, codec="avc1")
    assert plan(header, Sampling(fps=2.0, every_n=0)) == [0, 15, 30, 45, 60, 75]
    assert plan(header, Sampling(every_n=40, fps=0)) == [0, 40, 80]
    with pytest.raises(ValueError, match="no frame count"):
        plan(VideoHeader(640, 360, fps=0.0, frames=0, codec="VP90"), EVERY_5)


def test_request_parameters_override_the_default_sampling() -> None:
    default = Sampling(fps=1.0, every_n=0, max_samples=50)
    assert default.with_parameters({"every_n": 4}, cap=50) == Sampling(4, 0.0, 50)
    assert default.with_parameters({"fps": 5.0, "max_frames": 7}, cap=50) == Sampling(0, 5.0, 7)
    cases: list[tuple[dict[str, object], str]] = [
        ({"every_n": 2, "fps": 3.0}, "exactly one"),
        ({"max_frames": 51}, "above this server's cap"),
        ({"fps": "fast"}, "must be a number"),
        ({"every_n": 2.5}, "must be an integer"),
        # Found by fuzzing (fuzz/regressions/kserve-tensors/): int(inf) raised OverflowError,
        # which the services do not catch (a ValueError is their INVALID_ARGUMENT).
        ({"max_frames": float("inf")}, "must be an integer"),
        ({"every_n": float("-inf")}, "must be an integer"),
        ({"every_n": float("nan")}, "must be an integer"),
    ]
    for params, words in cases:
        with pytest.raises(ValueError, match=words):
            default.with_parameters(params, cap=50)


@pytest.mark.parametrize("codec", sorted(media.VIDEO_CODECS))
def test_each_codec_decodes_to_sampled_frames(codec: str) -> None:
    data = video(codec)
    header = probe_video(data, VideoLimits())
    assert (header.width, header.height) == (320, 240)
    assert header.fps == pytest.approx(10.0)
    out = read_all(data, EVERY_5)
    assert out.indices.tolist() == [0, 5, 10, 15, 20, 25]
    np.testing.assert_allclose(out.timestamps, out.indices / 10.0, atol=0.011)
    assert out.tensors.shape == (6, 3, 224, 224) and out.tensors.dtype == np.uint8
    # The frames are the cat, not grey: compare with the first source frame, decoded as an image.
    first = media.encode(media.video_frames(30)[0], "PNG")
    expected = decode_image(first, GEOMETRY, Limits()).astype(np.float32)
    assert np.abs(out.tensors[0].astype(np.float32) - expected).mean() < 12


def test_fps_sampling_and_the_cap_on_a_real_video() -> None:
    out = read_all(video("mpeg4_mp4"), Sampling(fps=2.0, every_n=0, max_samples=100))
    assert out.indices.tolist() == [0, 5, 10, 15, 20, 25]
    capped = read_all(video("mpeg4_mp4"), Sampling(every_n=1, fps=0, max_samples=7))
    assert capped.indices.tolist() == list(range(7))


@pytest.mark.parametrize(
    ("limits", "kind", "words"),
    [
        (VideoLimits(max_bytes=1000), "too_large", "the limit (max_video_bytes) is 1000"),
        (VideoLimits(max_pixels=320 * 239), "too_many_pixels", "(max_video_pixels) is 76480"),
        (VideoLimits(max_frames=29), "too_many_frames", "30 frames; the limit (max_video_frames)"),
        (VideoLimits(max_duration_s=2.5), "too_long", "3.0 s; the limit (max_video_duration_s)"),
    ],
)
def test_limits_are_checked_from_the_header(limits: VideoLimits, kind: str, words: str) -> None:
    with pytest.raises(DecodeError) as caught:
        probe_video(video("mpeg4_mp4"), limits)
    assert caught.value.kind == kind
    assert words in str(caught.value)


def test_limits_are_checked_again_while_decoding() -> None:
    # A header can lie: the reader counts what it actually decodes.
    reader = CpuVideoReader(video("vp9_webm"), EVERY_5, GEOMETRY, VideoLimits(), chunk=4)
    reader.limits = VideoLimits(max_frames=12)
    with pytest.raises(DecodeError, match=r"more than 12 frames; the limit \(max_video_frames\)"):
        list(reader.frames())
    reader.close()


@pytest.mark.parametrize(
    ("data", "kind"),
    [
        (b"", "empty"),
        (b"this is not a video at all" * 40, "unrecognised"),
        (media.cat_jpeg(), "unrecognised"),
    ],
)
def test_garbage_is_refused(data: bytes, kind: str) -> None:
    with pytest.raises(DecodeError) as caught:
        CpuVideoReader(data, EVERY_5, GEOMETRY, VideoLimits())
    assert caught.value.kind == kind


def test_a_truncated_video_gives_the_frames_it_has() -> None:
    data = video("mpeg4_mp4")
    try:
        out = read_all(data[: len(data) // 2], EVERY_5)
    except DecodeError as exc:  # or refuses it, by name; never a crash or a hang
        assert exc.kind in ("unrecognised", "corrupt")
    else:
        assert 0 < len(out.indices) <= 6
