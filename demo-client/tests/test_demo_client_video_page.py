"""The video run's web page: each answered frame is an item done, with the upload's progress."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from demo_client.video import FrameLabel, VideoStream
from demo_client.video_page import VideoPage


def frame(index: int, bytes_sent: int, elapsed_s: float, last: bool = False) -> FrameLabel:
    return FrameLabel(index, index / 10, "tabby", 0.9, 281, bytes_sent, 3000, elapsed_s, last)


def page() -> VideoPage:
    page = VideoPage(Path("/videos/clip.mp4"), "h:1", "classifier_video", 1024, None, "triton")
    page.started(cast(VideoStream, SimpleNamespace(total_bytes=3000)))
    return page


def snapshot(page: VideoPage) -> dict[str, Any]:
    return page.board.snapshot(page.recorder)


def test_each_frame_is_an_item_done_timed_since_the_last_answer() -> None:
    video = page()
    start = snapshot(video)
    assert start["phase"] == "running"
    assert start["run"] == {
        "target": "h:1", "model": "classifier_video", "video": "clip.mp4", "chunk_bytes": 1024,
        "window_s": start["run"]["window_s"], "envoy_admin": None, "cluster": "triton",
    }  # fmt: skip
    assert start["video"] == {"file": "clip.mp4", "bytes_sent": 0, "total_bytes": 3000,
                              "frames": []}  # fmt: skip
    video.frame(frame(0, 1024, 0.5))
    video.frame(frame(10, 2048, 0.7))
    shown = snapshot(video)
    assert shown["images"] == 2 and shown["requests"] == 2
    assert shown["video"]["bytes_sent"] == 2048
    assert [f["index"] for f in shown["video"]["frames"]] == [10, 0]  # newest first
    assert 199 <= shown["latency_ms"]["p99"] <= 501  # 500 ms to the first, 200 to the second


def test_the_end_says_finished_or_the_failure() -> None:
    done, failed = page(), page()
    done.frame(frame(0, 3000, 0.1, last=True))
    done.finished(None)
    failed.finished("clip.mp4: INVALID_ARGUMENT: video: not a video")
    assert snapshot(done)["phase"] == "finished"
    assert snapshot(done)["message"] == "finished: the video is classified"
    assert snapshot(done)["errors"]["total"] == 0
    assert snapshot(failed)["message"] == "clip.mp4: INVALID_ARGUMENT: video: not a video"
    assert snapshot(failed)["errors"]["by_code"] == {"FAILED": 1}
