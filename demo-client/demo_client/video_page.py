"""The web view of a video run: each classified frame is an item done (the chart shows
frames/s; "latency" is the time between answers), with the upload's progress."""

from __future__ import annotations

from pathlib import Path

from demo_client.stats import Recorder
from demo_client.video import FrameLabel, VideoStream
from demo_client.web import WebView
from demo_client.web_state import WINDOW_S, Frame, WebState


class VideoPage:
    """The page's dashboard and web view for one video streamed to ``model`` at ``target``;
    ``envoy_admin`` (None: none) gives the per-replica lines of ``cluster``."""

    def __init__(
        self,
        video: Path,
        target: str,
        model: str,
        chunk_bytes: int,
        envoy_admin: str | None,
        cluster: str,
    ) -> None:
        self.file = video.name
        self.recorder = Recorder(concurrency=1, batch=1)
        run = {
            "target": target,
            "model": model,
            "video": self.file,
            "chunk_bytes": chunk_bytes,
            "window_s": WINDOW_S,
            "envoy_admin": envoy_admin,
            "cluster": cluster,
        }
        self.board = WebState(run, [])
        self.web = WebView(self.board, self.recorder, [], envoy_admin, cluster)
        self.answered = 0.0  # elapsed_s of the last answer

    def started(self, stream: VideoStream) -> None:
        self.recorder.start()
        self.board.video(self.file, 0, stream.total_bytes)
        self.board.running()

    def frame(self, frame: FrameLabel) -> None:
        self.recorder.record_ok(frame.elapsed_s - self.answered, 1)
        self.answered = frame.elapsed_s
        self.board.video(self.file, frame.bytes_sent, frame.total_bytes)
        self.board.framed(
            Frame(frame.index, frame.timestamp_s, frame.label, frame.score, frame.elapsed_s)
        )

    def finished(self, failure: str | None) -> None:
        self.recorder.stop()
        if failure is not None:
            self.recorder.record_error("FAILED")
        self.board.finished(failure or "finished: the video is classified")
