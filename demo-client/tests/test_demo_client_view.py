"""The live view and the summary table render what the recorder holds."""

from __future__ import annotations

import asyncio
import io

from rich.console import Console

from demo_client.stats import Recorder
from demo_client.view import BLOCKS, LiveView, RunInfo, sparkline, summary_table
from inferline_testing.waits import wait_for_state

INFO = RunInfo(target="host:8080", model="classifier", concurrency=4, batch=2, duration_s=30)
WAIT_S = 30.0


def text_of(renderable: object) -> str:
    console = Console(file=io.StringIO(), width=100, color_system=None)
    console.print(renderable)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return out


def test_sparkline_scales_to_the_peak() -> None:
    assert sparkline([0, 50, 100]) == BLOCKS[0] + BLOCKS[4] + BLOCKS[-1]
    assert sparkline([0, 0]) == BLOCKS[0] * 2
    assert sparkline([]) == ""
    assert len(sparkline(range(100), width=10)) == 10


def test_render_shows_rates_latency_and_errors() -> None:
    recorder = Recorder(concurrency=4, batch=2)
    recorder.record_ok(0.012, 2)
    recorder.record_error("UNAVAILABLE")
    view = LiveView(recorder, INFO)
    view.history.extend([10.0, 20.0])
    out = text_of(view.render())
    assert "images/s" in out and "p99 12.0 ms" in out
    assert "errors 1 (UNAVAILABLE 1)" in out
    assert "/ 30 s" in out and "peak 20/s" in out
    assert "host:8080" in out


def test_render_of_a_count_run_shows_requests() -> None:
    info = RunInfo(target="t", model="m", concurrency=1, batch=1, count=10)
    out = text_of(LiveView(Recorder(), info).render())
    assert "0/10 requests" in out and "p50 -" in out


def test_summary_table() -> None:
    recorder = Recorder(concurrency=4, batch=2)
    recorder.record_ok(0.010, 2)
    recorder.stop()
    out = text_of(summary_table(recorder.summary(), INFO))
    assert "host:8080 (classifier)" in out
    assert "4 x 2" in out and "10.0 ms" in out


async def test_run_refreshes_until_done() -> None:
    console = Console(file=io.StringIO(), width=100, color_system=None, force_terminal=True)
    out: io.StringIO = console.file  # type: ignore[assignment]
    recorder, done = Recorder(), asyncio.Event()
    task = asyncio.create_task(LiveView(recorder, INFO, console).run(done))
    await wait_for_state(lambda: "0 done" in out.getvalue(), WAIT_S, "the first frame")
    recorder.record_ok(0.010, 2)  # what the running view shows next
    await wait_for_state(lambda: "1 done" in out.getvalue(), WAIT_S, "a refresh")
    assert not task.done()  # it runs until told
    done.set()
    await asyncio.wait_for(task, WAIT_S)
