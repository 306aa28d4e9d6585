"""video: an uploaded video's container check and open (:func:`inferline.imaging.video
.probe_video`: the byte limit, the mp4/Matroska check on the first bytes, OpenCV's FFmpeg opening
it from memory, the header limits). Whatever opens is within the limits.

Decoding the frames is not fuzzed here: that code is being reworked (videos in chunks); this
target holds only the stable entry point every video request passes first.
"""

from __future__ import annotations

from collections.abc import Callable

import cv2

from inferline.imaging.decode import DecodeError
from inferline.imaging.video import VideoLimits, container, probe_video

LIMITS = VideoLimits()


def one_input(data: bytes) -> None:
    try:
        header = probe_video(data, LIMITS)
    except DecodeError as exc:
        assert exc.kind and str(exc)
        return
    assert container(data) is not None
    assert 0 < header.width * header.height <= LIMITS.max_pixels, header
    assert header.frames <= LIMITS.max_frames, header
    assert header.duration_s <= LIMITS.max_duration_s, header


def setup() -> Callable[[bytes], None]:
    cv2.setNumThreads(1)
    return one_input


def seeds() -> dict[str, bytes]:
    """Short clips of every codec this machine can make (H.264 and H.265 need the ffmpeg CLI),
    small enough to mutate."""
    from inferline_testing import media

    frames = media.video_frames(4, 64, 48)
    made = {}
    for codec in media.VIDEO_CODECS:
        try:
            made[codec] = media.make_video(codec, frames, fps=5.0)
        except LookupError:
            continue
    return made
