"""The rich live view of a run and its summary table."""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from demo_client.stats import Recorder, Summary

REFRESH_S = 0.25
HISTORY_EVERY_S = 1.0
HISTORY_LEN = 60
BLOCKS = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class RunInfo:
    """What the run is pointed at, for the header."""

    target: str
    model: str
    concurrency: int
    batch: int
    channels: int = 1
    duration_s: float | None = None
    count: int | None = None


def sparkline(values: Sequence[float], width: int = HISTORY_LEN) -> str:
    """One block character per value (the last ``width``), scaled to the largest."""
    tail = list(values)[-width:]
    top = max(tail, default=0.0)
    if top <= 0:
        return BLOCKS[0] * len(tail)
    last = len(BLOCKS) - 1
    return "".join(BLOCKS[min(last, round(v / top * last))] for v in tail)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


def _errors(by_code: dict[str, int]) -> str:
    if not by_code:
        return "0"
    detail = ", ".join(f"{code} {n}" for code, n in by_code.items())
    return f"{sum(by_code.values())} ({detail})"


def _header(info: RunInfo) -> str:
    channels = "1 channel" if info.channels == 1 else f"{info.channels} channels"
    return (
        f"{info.target}  model {info.model}  "
        f"concurrency {info.concurrency} x batch {info.batch}, {channels}"
    )


class LiveView:
    """Renders a ``Recorder`` about four times a second while a run goes on."""

    def __init__(self, recorder: Recorder, info: RunInfo, console: Console | None = None) -> None:
        self.recorder = recorder
        self.info = info
        self.console = console or Console()
        self.history: deque[float] = deque(maxlen=HISTORY_LEN)
        self._next_sample = HISTORY_EVERY_S

    def _sample(self) -> None:
        if self.recorder.elapsed() >= self._next_sample:
            self.history.append(self.recorder.rate_now())
            self._next_sample += HISTORY_EVERY_S

    def _progress(self) -> tuple[str, ProgressBar | None]:
        elapsed, info = self.recorder.elapsed(), self.info
        label = f"{elapsed:.1f} s"
        if info.duration_s is not None:
            label += f" / {info.duration_s:g} s"
        if info.count is not None:
            done = self.recorder.requests
            label += f", {done:,}/{info.count:,} requests"
            return label, ProgressBar(total=info.count, completed=done, width=30)
        if info.duration_s is not None:
            done_s = min(elapsed, info.duration_s)
            return label, ProgressBar(total=info.duration_s, completed=done_s, width=30)
        return label, None

    def render(self) -> RenderableType:
        """The panel as it stands now."""
        r = self.recorder
        p50, p95, p99 = r.percentiles_ms()
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        grid.add_row(
            "images/s", Text(f"{r.rate_now():,.1f} now   {r.rate_average():,.1f} avg", "green")
        )
        grid.add_row("latency", f"p50 {_ms(p50)}   p95 {_ms(p95)}   p99 {_ms(p99)}")
        errors = r.errors_by_code
        grid.add_row(
            "requests",
            Text(f"{r.requests:,} done, errors {_errors(errors)}", "red" if errors else ""),
        )
        label, bar = self._progress()
        grid.add_row("elapsed", Group(label, bar) if bar is not None else label)
        peak = f"  peak {max(self.history):,.0f}/s" if self.history else "…"
        grid.add_row("history", Text(sparkline(self.history) + peak, "cyan"))
        return Panel(grid, title="inferline demo", subtitle=_header(self.info))

    async def run(self, done: asyncio.Event) -> None:
        """Refresh until ``done`` is set; the final frame stays on screen."""
        with Live(self.render(), console=self.console, auto_refresh=False) as live:
            while not done.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), REFRESH_S)
                self._sample()
                live.update(self.render(), refresh=True)


def summary_table(summary: Summary, info: RunInfo) -> Table:
    """The end-of-run table."""
    table = Table(title="inferline demo summary", show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("target", f"{info.target} ({info.model})")
    table.add_row("images", f"{summary.images:,}")
    table.add_row("requests", f"{summary.requests:,}")
    table.add_row("errors", _errors(summary.errors_by_code))
    table.add_row("images/s", f"{summary.images_per_s:,.1f}")
    table.add_row("p50", _ms(summary.p50_ms))
    table.add_row("p95", _ms(summary.p95_ms))
    table.add_row("p99", _ms(summary.p99_ms))
    table.add_row("duration", f"{summary.duration_s:.1f} s")
    table.add_row("concurrency x batch", f"{summary.concurrency} x {summary.batch}")
    return table
