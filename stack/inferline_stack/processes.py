"""Start, find and stop detached processes, each recorded as ``.run/<name>.pid``.

Each process leads its own session (process group), so stopping it also stops its children
(Triton's server under PyTriton, say) and nothing is left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


class ProcessTable:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.log_dir = run_dir / "logs"

    def pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.log_dir / f"{name}.log"

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str]) -> int:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_file(name), "ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
                start_new_session=True,
            )
        self.pid_file(name).write_text(f"{proc.pid}\n")
        return proc.pid

    def pid(self, name: str) -> int | None:
        """The recorded pid of ``name`` if that process still runs."""
        try:
            pid = int(self.pid_file(name).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) else None

    def running(self, name: str) -> bool:
        return self.pid(name) is not None

    def names(self) -> list[str]:
        return sorted(p.stem for p in self.run_dir.glob("*.pid"))

    def stop(self, name: str, grace: float = 10.0) -> bool:
        """SIGTERM the process group, SIGKILL what remains after ``grace``; True if one ran."""
        pid = self.pid(name)
        self.pid_file(name).unlink(missing_ok=True)
        if pid is None:
            return False
        stop_group(pid, grace)
        return True

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            text = self.log_file(name).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone once reaped.
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return True


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(pgid: int, grace: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        alive(pgid)  # reaps our own child so it stops counting
        if not group_alive(pgid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
