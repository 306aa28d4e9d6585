"""Start, find and stop detached processes, each recorded as ``.run/<name>.pid``.

Each process leads its own session (process group). Stopping one sends SIGTERM to it, which
stops its own children in order (PyTriton stops tritonserver), then SIGKILL to whatever is left
of its group after a grace period, so nothing is left behind.
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

    def start(
        self, name: str, argv: Sequence[str], env: Mapping[str, str], fingerprint: str = ""
    ) -> int:
        """Start ``argv`` detached, output to its log; ``fingerprint`` (what it was started
        with) is kept beside the pid so that a later ``up`` can tell it is still current."""
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
        # pid, what it was started with, and when (a pid reused after a reboot is not ours)
        self.pid_file(name).write_text(f"{proc.pid}\n{fingerprint}\n{start_time(proc.pid)}\n")
        return proc.pid

    def _record(self, name: str) -> list[str]:
        try:
            return self.pid_file(name).read_text().splitlines()
        except OSError:
            return []

    def recorded_pid(self, name: str) -> int | None:
        """The pid written when ``name`` started, running or not."""
        record = self._record(name)
        try:
            return int(record[0]) if record else None
        except ValueError:
            return None

    def pid(self, name: str) -> int | None:
        """The recorded pid of ``name`` if that process still runs."""
        pid, record = self.recorded_pid(name), self._record(name)
        if pid is None or not alive(pid):
            return None
        started = record[2] if len(record) > 2 else ""
        return pid if not started or started == start_time(pid) else None

    def fingerprint(self, name: str) -> str:
        """What ``name`` was started with (see :meth:`start`); empty if unknown."""
        record = self._record(name)
        return record[1] if len(record) > 1 else ""

    def running(self, name: str) -> bool:
        return self.pid(name) is not None

    def names(self) -> list[str]:
        return sorted(p.stem for p in self.run_dir.glob("*.pid"))

    def stop(self, name: str, grace: float = 10.0) -> bool:
        """SIGTERM the process group, SIGKILL what remains after ``grace``; True if one ran."""
        return bool(self.stop_all([name], grace))

    def stop_all(self, names: Sequence[str], grace: float = 10.0) -> list[str]:
        """Stop several at once (SIGTERM to all, then wait); the names that were running."""
        groups = {}
        for name in names:
            pid = self.pid(name)
            self.pid_file(name).unlink(missing_ok=True)
            if pid is not None:
                groups[name] = pid
        stop_groups(list(groups.values()), grace)
        return list(groups)

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            text = self.log_file(name).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def start_time(pid: int) -> str:
    """When ``pid`` started (clock ticks since boot, from /proc); empty where unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""  # field 22 of proc(5); fields[0] is field 3


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


def stop_groups(pgids: Sequence[int], grace: float) -> None:
    """SIGTERM each group's leader, SIGKILL what remains of the groups after ``grace``.

    The leader (``python -m ...``) stops its own children in order (PyTriton stops
    tritonserver, which stops its model stubs); a group whose leader is gone gets the
    SIGTERM itself.
    """
    for pgid in pgids:
        try:
            os.kill(pgid, signal.SIGTERM)
        except ProcessLookupError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    left = list(pgids)
    while left and time.monotonic() < deadline:
        for pgid in left:
            alive(pgid)  # reaps our own child so it stops counting
        left = [pgid for pgid in left if group_alive(pgid)]
        if left:
            time.sleep(0.05)
    for pgid in left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 2.0  # SIGKILL cannot be ignored; its ports free soon after
    while left and time.monotonic() < deadline:
        for pgid in left:
            alive(pgid)
        left = [pgid for pgid in left if group_alive(pgid)]
        if left:
            time.sleep(0.02)


def kill_group(pgid: int) -> None:
    """``kill -9`` a whole process group (tests: a backend that dies without warning)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
