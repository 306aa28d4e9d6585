"""Stopping what we started, for good: a process, what it started, and what those started.

The one place that knows how: the stack's process table, the GPU pod, the test harness and the
benchmarks all stop processes through it. A :class:`Claim` says which processes are ours; any
one of these marks a process:

* its environment carries one of our owner tokens (``INFERLINE_OWNER``, a list like ``PATH``):
  every process inherits its parent's, and whoever starts one adds a token of its own
  (:func:`owner_env`), so a process that left its group or lost its parent is still known;
* its executable lies in a folder of ours: PyTriton runs ``tritonserver`` and its Python
  backend stubs from copies in the replica's workspace;
* it is in the process group of a leader we started in a session of its own and started no
  earlier than that leader, in the same boot. A group outlives a leader killed alone (SIGKILL
  reaches no one else), and its number cannot go to another process while it has members; a
  leader pid now held by another process (another start time) claims nothing.

:func:`stop` sends SIGTERM to the roots of what a claim marks (those whose parent it does not
mark: a leader stops its own children in order, PyTriton its tritonserver), SIGKILL to what is
left after the grace period, and returns once nothing it marks runs. A zombie counts as gone: it
holds no port, memory or file.

:func:`die_with_parent` is the kernel's half: a child started with it gets a signal when its
parent dies, however that happens (``prctl(PR_SET_PDEATHSIG)``). It reaches direct children
only, so each parent passes it on: PyTriton does for tritonserver, whose stubs watch it.
:func:`owning` is the half of a whole program (a benchmark, a test session): SIGTERM and SIGHUP
raise like Ctrl-C, so every ``finally`` runs, and on the way out whatever still carries its
token is stopped.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

OWNER_ENV = "INFERLINE_OWNER"
POLL_S = 0.05
KILL_WAIT_S = 10.0  # SIGKILL cannot be ignored, but a process with gigabytes mapped takes a while
PR_SET_PDEATHSIG = 1  # linux/prctl.h
PROC = Path("/proc")


def start_time(pid: int) -> str:
    """When ``pid`` started (clock ticks since boot, from /proc); empty where unknown."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return ""
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else ""  # field 22 of proc(5); fields[0] is field 3


def boot_id() -> str:
    """This boot's id: a start time is counted from it."""
    try:
        return (PROC / "sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def owner_env(token: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``OWNER_ENV`` for a child: the tokens ``environ`` (this process's) carries, and ``token``."""
    inherited = (os.environ if environ is None else environ).get(OWNER_ENV, "")
    tokens = [t for t in inherited.split(os.pathsep) if t and t != token]
    return {OWNER_ENV: os.pathsep.join([*tokens, token])}


@dataclass(frozen=True)
class Claim:
    """Which processes are ours; any field that is set marks some (see the module's text)."""

    group: int = 0  # the pid of a leader we started in a session of its own ...
    started: str = ""  # ... its start time then ("": known only while that leader runs) ...
    boot: str = ""  # ... and the boot it started in ("": this one)
    owner: str = ""  # an owner token its environment carries
    owners_in: str = ""  # any owner token naming something in this folder ("<folder>/<name>")
    folder: str = ""  # its executable lies under this folder

    @classmethod
    def leading(cls, pid: int) -> Claim:
        """The process group of ``pid``, which we just started in a session of its own."""
        return cls(group=pid, started=start_time(pid), boot=boot_id())

    def marks(self, tokens: Sequence[str], exe: str) -> bool:
        """Whether a process with these owner tokens and this executable is ours (the group
        aside: :func:`claimed` checks that)."""
        if self.owner and self.owner in tokens:
            return True
        if self.owners_in and any(Path(t).parent == Path(self.owners_in) for t in tokens):
            return True
        return bool(self.folder and exe) and (
            exe == self.folder or exe.startswith(self.folder.rstrip("/") + "/")
        )


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: int
    started: int


def process(pid: int) -> Proc | None:
    """``pid`` as /proc shows it; None once it is gone or a zombie."""
    try:
        with open(f"{PROC}/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return Proc(pid, int(fields[1]), int(fields[2]), int(fields[19]))


def _owners(pid: int) -> list[str]:
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or another user's
        return []
    prefix = f"{OWNER_ENV}=".encode()
    for entry in environ.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace").split(os.pathsep)
    return []


def _exe(pid: int) -> str:
    try:
        return str((PROC / str(pid) / "exe").readlink()).removesuffix(" (deleted)")
    except OSError:
        return ""


def processes() -> dict[int, Proc]:
    """Every live process but this one."""
    found = {}
    for entry in os.listdir(PROC):  # noqa: PTH208 (as leftovers.in_use: a scan's cost)
        if entry.isdigit() and int(entry) != os.getpid():
            proc = process(int(entry))
            if proc is not None:
                found[proc.pid] = proc
    return found


def _marked(claims: Sequence[Claim]) -> dict[int, tuple[Proc, Claim]]:
    """The live processes (never this one) that ``claims`` mark, each with the first that does."""
    procs, boot = processes(), boot_id()
    groups: dict[int, tuple[int, Claim]] = {}  # pgid -> (the earliest start of ours, claim)
    for claim in claims:
        if not claim.group or (claim.boot and claim.boot != boot):
            continue
        leader = procs.get(claim.group)
        if claim.started and (leader is None or str(leader.started) == claim.started):
            groups.setdefault(claim.group, (int(claim.started), claim))
        elif not claim.started and leader is not None:  # unverifiable: only while it leads
            groups.setdefault(claim.group, (leader.started, claim))
    by_owner = [c for c in claims if c.owner or c.owners_in]
    by_folder = [c for c in claims if c.folder]
    found: dict[int, tuple[Proc, Claim]] = {}
    for proc in procs.values():
        if proc.pgid in groups and proc.started >= groups[proc.pgid][0]:
            found[proc.pid] = (proc, groups[proc.pgid][1])
            continue
        tokens = _owners(proc.pid) if by_owner else []
        exe = _exe(proc.pid) if by_folder else ""
        marking = next((c for c in [*by_owner, *by_folder] if c.marks(tokens, exe)), None)
        if marking is not None:
            found[proc.pid] = (proc, marking)
    return found


def claimed(claims: Sequence[Claim]) -> list[int]:
    """The live processes (never this one) that ``claims`` mark."""
    return sorted(_marked(claims))


def send(pids: Sequence[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signum)


def wait_gone(claims: Sequence[Claim], timeout_s: float) -> bool:
    """Until nothing ``claims`` mark runs (True), or ``timeout_s`` passed (False). Between
    scans of every process (what a claim marks: their environments, their executables), it
    watches only the processes the last scan found; once they are gone, it scans again for any
    they started meanwhile."""
    deadline = time.monotonic() + timeout_s
    while found := {pid: proc.started for pid, (proc, _) in _marked(claims).items()}:
        while any(_same(pid, started) for pid, started in found.items()):
            if time.monotonic() > deadline:
                return False
            time.sleep(POLL_S)
        if time.monotonic() > deadline:  # what keeps starting processes that end at once
            return not _marked(claims)
    return True


def _same(pid: int, started: int) -> bool:
    """Whether ``pid`` still runs as the process that started at ``started``."""
    proc = process(pid)
    return proc is not None and proc.started == started


def stop(claims: Sequence[Claim], grace_s: float) -> dict[Claim, list[int]]:
    """Stop everything ``claims`` mark: SIGTERM to the roots, SIGKILL to what is left after
    ``grace_s``. What each claim marked when this began (those that marked nothing left out)."""
    found = _marked(claims)
    if not found:
        return {}
    send([pid for pid, (proc, _) in found.items() if proc.ppid not in found], signal.SIGTERM)
    if not wait_gone(claims, grace_s):
        send(claimed(claims), signal.SIGKILL)
        wait_gone(claims, KILL_WAIT_S)
    marked: dict[Claim, list[int]] = {}
    for pid, (_, claim) in sorted(found.items()):
        marked.setdefault(claim, []).append(pid)
    return marked


def die_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn``: the child gets ``signum`` when this process dies, however it dies (and
    at once if it already has). Linux; elsewhere it does nothing."""
    parent = os.getpid()
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here, not in the child
    except (OSError, AttributeError):
        prctl = None

    def in_child() -> None:
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl: nobody would signal it
            os.kill(os.getpid(), signum)

    return in_child


class Terminated(KeyboardInterrupt):
    """SIGTERM, SIGHUP or SIGINT, raised like Ctrl-C's KeyboardInterrupt so that every
    ``finally`` runs (asyncio.run cancels its tasks, pytest tears its fixtures down)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def signals_raise(
    signums: Sequence[int] = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT),
) -> Iterator[threading.Event]:
    """Within the block, ``signums`` raise :class:`Terminated` in the main thread. Once: the
    event it yields is set then, and while it is set (the block set it: it is cleaning up) a
    signal does nothing, so that it does not cut short the cleanup. Elsewhere than in the main
    thread (where signals cannot be handled) it does nothing.

    SIGINT too, though Python raises KeyboardInterrupt for it already: under ``asyncio.run``
    Python's own handler only cancels the main task, and a coroutine that ends without raising
    that cancellation (a CancelledError turned into a result on the way, as a timeout helper
    may) lost Ctrl-C altogether: a benchmark went on to its end and exited 0. asyncio.run
    leaves a handler of the program's own in place, so this one raises wherever it lands."""
    stopping = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stopping
        return

    def handler(signum: int, _frame: FrameType | None) -> None:
        if not stopping.is_set():
            stopping.set()
            raise Terminated(signum)

    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield stopping
    finally:
        for signum, action in previous.items():
            signal.signal(signum, action)


@contextlib.contextmanager
def owning(token: str, grace_s: float = 10.0) -> Iterator[None]:
    """Every process started within the block carries ``token``; leaving it, however (an
    exception, SIGTERM, SIGHUP, Ctrl-C), stops whatever still carries it."""
    saved = os.environ.get(OWNER_ENV)
    os.environ.update(owner_env(token))
    try:
        with signals_raise() as stopping:
            try:
                yield
            finally:
                stopping.set()  # a SIGTERM now would only cut the cleanup short
                stop([Claim(owner=token)], grace_s)
    finally:
        if saved is None:
            os.environ.pop(OWNER_ENV, None)
        else:
            os.environ[OWNER_ENV] = saved
