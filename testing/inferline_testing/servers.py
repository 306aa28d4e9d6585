"""A server process for the duration of a block: started with its output in a log, polled until
it answers (or failed at once, with the log's tail, if it exits first), then stopped, with
whatever it started (:mod:`inferline_stack.reaper`)."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

from inferline_stack import reaper
from inferline_testing.waits import wait_until

START_TIMEOUT_S = 60.0
STOP_GRACE_S = 30.0


@contextlib.contextmanager
def running(
    name: str,
    argv: Sequence[str],
    ready: Callable[[], bool],
    log: Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = START_TIMEOUT_S,
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` running until the block ends, once ``ready()`` holds; SIGTERM, then SIGKILL to
    what is left of its process group."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    claim = reaper.Claim.leading(process.pid)
    try:

        def exited() -> str | None:
            if process.poll() is None:
                return None
            tail = log.read_text(errors="replace")[-3000:]
            return f"{name} exited {process.returncode}:\n{tail}"

        wait_until(ready, timeout_s, f"{name} ready", abort=exited)
        yield process
    finally:
        reaper.stop([claim], STOP_GRACE_S)
        process.wait()
