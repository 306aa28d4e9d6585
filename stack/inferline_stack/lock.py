"""One ``up`` or ``scale`` at a time per run directory: an fcntl lock on ``scale.lock``."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from inferline_stack.ui import console


@contextlib.contextmanager
def scale_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``<run_dir>/scale.lock`` exclusively; says so when it has to wait for another."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "scale.lock", "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            console.print("waiting for another 'up' or 'scale' of this stack to finish …")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
