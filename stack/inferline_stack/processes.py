"""Start, find and stop detached processes, each recorded as ``.run/<name>.pid``.

Each process leads its own session (process group) and carries an owner token of its own,
``<run folder>/<name>`` (:mod:`inferline_stack.reaper`), which whatever it starts inherits.
Stopping one sends SIGTERM to it, which stops its own children in order (PyTriton stops
tritonserver), then SIGKILL to whatever of it is left after a grace period. What is "of it":
its process group (checked against its recorded start time, so a reused pid is never hit), what
carries its token, what runs from its workspace; so a process whose leader was killed alone is
stopped too, by the next ``down``, ``scale`` or ``up``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from inferline_stack import leftovers, reaper
from inferline_stack.reaper import start_time


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
                env={**os.environ, **env, **reaper.owner_env(self.owner(name))},
                start_new_session=True,
            )
        # pid, what it was started with, and when, in which boot (a reused pid is not ours)
        claim = reaper.Claim.leading(proc.pid)
        self.pid_file(name).write_text(
            f"{proc.pid}\n{fingerprint}\n{claim.started}\n{claim.boot}\n"
        )
        return proc.pid

    def owner(self, name: str) -> str:
        """The owner token of ``name``'s processes (:mod:`inferline_stack.reaper`)."""
        return f"{self.run_dir.resolve()}/{name}"

    def claim(self, name: str) -> reaper.Claim:
        """Every process of ``name``, its leader running or not: its recorded process group,
        what carries its token, what runs from its workspace (a Triton replica's)."""
        record = self._record(name)
        return reaper.Claim(
            group=self.recorded_pid(name) or 0,
            started=record[2] if len(record) > 2 else "",
            boot=record[3] if len(record) > 3 else "",
            owner=self.owner(name),
            folder=str(leftovers.workspace(self.run_dir, name).resolve()),
        )

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
        """The recorded pid of ``name`` if that process (its leader) still runs."""
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
        """Stop every process of ``name`` (:meth:`claim`): SIGTERM, SIGKILL what remains after
        ``grace``; forget its pid file. True if anything of it ran."""
        return bool(self.stop_all([name], grace))

    def stop_all(self, names: Sequence[str], grace: float = 10.0) -> list[str]:
        """Stop several at once (SIGTERM to all, then wait); the names of which anything ran."""
        claims = {name: self.claim(name) for name in names}
        for name in names:
            self.pid_file(name).unlink(missing_ok=True)
        stopped = reaper.stop(list(claims.values()), grace)
        return [name for name, claim in claims.items() if claim in stopped]

    def stop_strays(self, grace: float = 10.0) -> list[int]:
        """Stop whatever of this run folder still runs, whatever the pid files say: every
        process that carries one of its tokens or runs from its workspaces. Their pids."""
        claim = reaper.Claim(
            owners_in=str(self.run_dir.resolve()),
            folder=str(leftovers.workspaces(self.run_dir).resolve()),
        )
        return reaper.stop([claim], grace).get(claim, [])

    def log_tail(self, name: str, lines: int = 30) -> str:
        try:
            text = self.log_file(name).read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (killed, not reaped yet) does not; one of ours is reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return reaper.process(pid) is not None


def group_alive(pgid: int) -> bool:
    """Whether a live process (not a zombie) is in process group ``pgid``."""
    return any(p.pgid == pgid for p in reaper.processes().values())


def kill_group(pgid: int) -> None:
    """``kill -9`` a whole process group (tests: a backend that dies without warning)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
