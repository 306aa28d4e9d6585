"""Nothing a benchmark starts outlives it: after it ends, however (done, an exception in its
stack's block, SIGTERM, SIGHUP, Ctrl-C in the middle of a run), no process names its run folder.

The benchmarks run as ``make bench-*`` runs them, each a process of its own, with ``TMPDIR``
pointed at a folder of the test's own: their run folders are made there, and every process they
start inherits a ``TMPDIR`` that names it. Each gets its signal once the processes it was
stopped among run (a ``tritonserver``, a GPU pod, an Envoy: found in /proc, not waited for by
the clock).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.bench_eds import hop
from bench.benchlib import local_stack
from inferline_testing.procfs import describe, naming
from inferline_testing.waits import wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
START_S = 240.0  # generous: only bounds how long a broken run takes to fail
STOP_S = 120.0  # its stacks' grace periods, and SIGKILL's


@pytest.fixture
def run_root() -> Iterator[Path]:
    """A folder with a short name (PyTriton's sockets go in it, and a socket's path is short)."""
    path = Path(tempfile.mkdtemp(prefix="il-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Failed(Exception):
    pass


@pytest.mark.parametrize("fails", [False, True], ids=["when its block ends", "when it raises"])
def test_a_benchmarks_local_stack_leaves_no_process(run_root: Path, fails: bool) -> None:
    with (
        contextlib.suppress(Failed),
        local_stack(run_root, model="simulated_gpu", prometheus=False) as config,
    ):
        assert naming(config.run_dir)  # it runs
        if fails:
            raise Failed
    left = naming(run_root)
    assert left == [], describe(left)


def test_a_benchmarks_harness_processes_leave_no_process(run_root: Path) -> None:
    """bench_eds's Envoy hop: a fake backend, the control plane, Envoy (the test harness's)."""
    measured = asyncio.run(hop(run_root, requests=50))
    assert measured["requests"] == 50
    left = naming(run_root)
    assert left == [], describe(left)


def cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


# id: (its command line, the signal, what runs when it is sent: a piece of a command line)
STOPPED = {
    "faults by SIGTERM": (["bench.faults", "--repetitions=1"], signal.SIGTERM, "tritonserver"),
    "e2e by Ctrl-C in its in-pod stack": (
        ["bench.e2e", "--duration=1", "--concurrency=2"], signal.SIGINT, "inferline_stack.pod"
    ),
    "batcher by SIGHUP": (
        ["bench.batcher", "--parts=throughput", "--quick"], signal.SIGHUP, "tritonserver"
    ),
    "bench_eds by SIGTERM": (["bench.bench_eds", "--events=2"], signal.SIGTERM, "envoy -c"),
}  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "signum", "running"),
    [pytest.param(*case, id=name) for name, case in STOPPED.items()],
)
def test_a_benchmark_stopped_by_a_signal_leaves_no_process(
    run_root: Path, argv: list[str], signum: int, running: str
) -> None:
    env = {**os.environ, "TMPDIR": str(run_root)}
    log = run_root / "bench.log"
    with log.open("wb") as out:
        bench = subprocess.Popen(
            [sys.executable, "-m", *argv],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # as make runs it: a signal is for it alone
        )
    try:

        def exited() -> str | None:
            return None if bench.poll() is None else f"it exited {bench.returncode}"

        wait_until(
            lambda: any(running in cmdline(p) for p in naming(run_root)),
            START_S,
            f"{running} among what {argv[0]} started",
            abort=exited,
        )
        bench.send_signal(signum)
        bench.wait(STOP_S)
    finally:
        if bench.poll() is None:
            bench.kill()
            bench.wait()
    output = log.read_text(errors="replace")
    assert bench.returncode == 128 + signum, output[-3000:]
    assert f"stopped by {signal.Signals(signum).name}" in output
    left = naming(run_root)
    assert left == [], describe(left)
