"""The terminal view of a video streamed in chunks: each classified frame as a line, and a live
panel with the upload's progress and frames/s; then a summary table."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from demo_client.video import FrameLabel, VideoStream, VideoSummary

REFRESH_S = 0.25
MiB = 1024 * 1024


@dataclass(frozen=True)
class VideoInfo:
    """What the stream is pointed at, for the header."""

    target: str
    model: str


def frame_line(frame: FrameLabel) -> Text:
    """``frame  40   4.00 s  tabby (0.612)``."""
    return Text.assemble(
        ("frame ", "dim"),
        (f"{frame.index:>6}", "bold"),
        f"  {frame.timestamp_s:>8.2f} s  ",
        (frame.label, "green"),
        f" ({frame.score:.3f})",
    )


def _size(n: float) -> str:
    """``512 B``, ``16.0 KiB``, ``1.5 MiB``, ``2.0 GiB``."""
    for unit, scale in (("GiB", 1024 * MiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} B"


class VideoView:
    """Prints each frame as it is classified above a panel refreshed four times a second."""

    def __init__(self, stream: VideoStream, info: VideoInfo, console: Console | None = None):
        self.stream, self.info = stream, info
        self.console = console or Console()
        self.frames: list[FrameLabel] = []
        self.live: Live | None = None

    def add(self, frame: FrameLabel) -> None:
        self.frames.append(frame)
        (self.live.console if self.live is not None else self.console).print(frame_line(frame))

    def render(self) -> RenderableType:
        stream = self.stream
        elapsed = stream.elapsed_s
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        rate = stream.bytes_sent / elapsed if elapsed > 0 else 0.0
        upload = f"{_size(stream.bytes_sent)} / {_size(stream.total_bytes)}  ({_size(rate)}/s)"
        bar = ProgressBar(total=max(stream.total_bytes, 1), completed=stream.bytes_sent, width=30)
        grid.add_row("upload", Group(upload, bar))
        frames_per_s = len(self.frames) / elapsed if elapsed > 0 else 0.0
        grid.add_row("frames", Text(f"{len(self.frames):,} classified, {frames_per_s:,.1f}/s"))
        first = f"{self.frames[0].elapsed_s:.2f} s" if self.frames else "…"
        grid.add_row("first result", first)
        last = frame_line(self.frames[-1]) if self.frames else Text("…")
        grid.add_row("latest", last)
        grid.add_row("elapsed", f"{elapsed:.1f} s")
        subtitle = f"{self.info.target}  model {self.info.model}  {stream.path.name}"
        return Panel(grid, title="inferline video", subtitle=subtitle)

    async def run(self, done: asyncio.Event) -> None:
        """Refresh until ``done`` is set; the final frame stays on screen."""
        with Live(self.render(), console=self.console, auto_refresh=False) as live:
            self.live = live
            try:
                while not done.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(done.wait(), REFRESH_S)
                    live.update(self.render(), refresh=True)
            finally:
                self.live = None


def video_summary_table(summary: VideoSummary, info: VideoInfo) -> Table:
    """The end-of-stream table."""
    table = Table(title="inferline video summary", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("target", f"{info.target} ({info.model})")
    table.add_row("file", f"{summary.file} ({_size(summary.bytes)})")
    table.add_row("chunks", f"{summary.chunks:,} of up to {_size(summary.chunk_bytes)}")
    table.add_row("frames classified", f"{len(summary.frames):,}")
    table.add_row("frames/s", f"{summary.frames_per_s:,.1f}")
    first = summary.first_result_s
    table.add_row("first result", "-" if first is None else f"{first:.2f} s")
    upload = summary.upload_s
    table.add_row("upload", "-" if upload is None else f"{upload:.2f} s")
    table.add_row("duration", f"{summary.duration_s:.2f} s")
    return table
