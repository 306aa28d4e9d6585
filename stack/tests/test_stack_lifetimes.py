"""What outlives its owner: nothing. Real processes, stand-ins for the services (plain Python that
says in its log when it is set up), killed with SIGKILL as a crash or ``kill -9`` would.

A supervisor killed alone (a GPU pod's, any process group's leader) takes its children along
(the kernel's parent-death signal); what even that misses (a grandchild that ignores SIGTERM, one
that left the group) ``down``, ``scale`` and ``up`` stop by the record the stack kept: the
process group, checked against its leader's start time, and the owner token every process of
the stack inherits. A pid that another process holds now is never hit.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferline_stack import reaper
from inferline_stack.processes import ProcessTable, kill_group
from inferline_stack.services import python
from inferline_testing.procfs import descendants, describe, naming, running
from inferline_testing.waits import wait_until

WAIT_S = 30.0  # generous: only bounds how long a broken run takes to fail
LIFETIME = "time.sleep(120)"  # how long a stand-in lives if nothing stops it

# A grandchild that ignores SIGTERM; with ``setsid``, one that also leaves its group.
GRANDCHILD = (
    "import os, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "if 'setsid' in sys.argv: os.setsid()\n"
    "print('grandchild ignores SIGTERM', flush=True)\n"
    f"{LIFETIME}\n"
)


def parent_of_one(*grandchild_args: str) -> list[str]:
    """A process that starts :data:`GRANDCHILD` and waits; SIGTERM ends it (Python's default)."""
    script = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {GRANDCHILD!r}, *{list(grandchild_args)!r}])\n"
        "print('parent started', flush=True)\n"
        f"{LIFETIME}\n"
    )
    return [sys.executable, "-c", script]


PREPROCESS_STAND_IN = [
    sys.executable, "-c", f"import time\nprint('preprocess started', flush=True)\n{LIFETIME}\n"
]  # fmt: skip


def logged(table: ProcessTable, name: str, *lines: str) -> None:
    wait_until(
        lambda: all(line in table.log_tail(name, 100) for line in lines),
        WAIT_S,
        f"{name} logs {lines}",
    )


def gone(pids: list[int], what: str) -> None:
    wait_until(lambda: not running(pids), WAIT_S, f"{what} gone")


@pytest.fixture
def others() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test starts outside the stack, each in a session of its own; their groups
    killed after it."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        kill_group(process.pid)
        process.wait()


def test_stop_reclaims_the_group_of_a_leader_killed_alone(tmp_path: Path) -> None:
    table = ProcessTable(tmp_path)
    leader = table.start("batcher-0", parent_of_one(), {})
    logged(table, "batcher-0", "parent started", "grandchild ignores SIGTERM")
    (child,) = descendants(leader)
    os.kill(leader, signal.SIGKILL)
    wait_until(lambda: not table.running("batcher-0"), WAIT_S, "the leader gone")
    assert running([child])  # nothing took it along: no parent-death signal, SIGTERM ignored
    assert table.stop("batcher-0", grace=0.5)  # its group, recorded: SIGKILL after the grace
    assert not running([child])
    assert table.names() == []


def test_stop_reclaims_a_process_that_left_the_group_by_its_owner_token(tmp_path: Path) -> None:
    table = ProcessTable(tmp_path)
    leader = table.start("middleman-0", parent_of_one("setsid"), {})
    logged(table, "middleman-0", "parent started", "grandchild ignores SIGTERM")
    (child,) = descendants(leader)
    os.kill(leader, signal.SIGKILL)
    assert os.getpgid(child) == child  # a group (and session) of its own
    assert table.stop("middleman-0", grace=0.5)
    assert not running([child])


def test_a_pid_held_by_another_process_now_is_never_hit(
    tmp_path: Path, others: list[subprocess.Popen[bytes]]
) -> None:
    """A pid file whose pid another process holds now (another start time, or another boot):
    that process and its group are left alone."""
    table = ProcessTable(tmp_path)
    others += [subprocess.Popen(parent_of_one(), start_new_session=True) for _ in range(2)]
    stranger, other_boot = others
    wait_until(lambda: all(descendants(p.pid) for p in others), WAIT_S, "the strangers' children")
    group = {p.pid: descendants(p.pid) for p in others}
    claim = reaper.Claim.leading(stranger.pid)
    table.pid_file("eds").write_text(f"{stranger.pid}\n\n{int(claim.started) - 1}\n{claim.boot}\n")
    claim = reaper.Claim.leading(other_boot.pid)
    table.pid_file("envoy").write_text(f"{other_boot.pid}\n\n{claim.started}\nanother-boot\n")
    assert table.stop_all(["eds", "envoy"], grace=0.5) == []
    for process in others:
        assert running([process.pid, *group[process.pid]]) == [process.pid, *group[process.pid]]


def pod(table: ProcessTable, name: str, triton: list[str]) -> int:
    """A GPU pod (the real ``inferline_stack.pod``) around stand-ins, started as the stack
    starts it."""
    token = table.run_dir / "pods" / f"{name}.token"
    argv = python(
        "inferline_stack.pod",
        f"--token-file={token}",
        f"--triton={shlex.join(triton)}",
        f"--preprocess={shlex.join(PREPROCESS_STAND_IN)}",
        "--grace-s=1",
    )
    return table.start(name, argv, {})


def down(run_dir: Path) -> str:
    """``make down`` against ``run_dir``: ``python -m inferline_stack down``, a process of its
    own; what it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERLINE_STACK_")}
    done = subprocess.run(
        python("inferline_stack", "down"),
        env={**env, "INFERLINE_STACK_RUN_DIR": str(run_dir), "INFERLINE_STACK_STOP_GRACE_S": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_kill_9_of_a_pod_supervisor_takes_triton_and_the_preprocess_along(tmp_path: Path) -> None:
    table = ProcessTable(tmp_path)
    supervisor = pod(table, "triton-0", parent_of_one())
    logged(table, "triton-0", "parent started", "grandchild ignores SIGTERM", "preprocess started")
    tree = descendants(supervisor)  # Triton's stand-in, its grandchild, the preprocess's
    children = [pid for pid in tree if _parent(pid) == supervisor]
    assert len(tree) == 3 and len(children) == 2, describe(tree)
    os.kill(supervisor, signal.SIGKILL)
    gone(children, "the pod's Triton and preprocess")  # the kernel's SIGTERM: no one else's
    (grandchild,) = set(tree) - set(children)
    assert running([grandchild])  # it ignores SIGTERM: only the stack's record can find it
    out = down(tmp_path)
    assert "stopped triton-0" in out
    left = naming(tmp_path)
    assert left == [], describe(left)


def test_kill_9_of_a_pod_supervisor_then_down_reclaims_a_grandchild_that_left_the_group(
    tmp_path: Path,
) -> None:
    table = ProcessTable(tmp_path)
    supervisor = pod(table, "triton-1", parent_of_one("setsid"))
    logged(table, "triton-1", "parent started", "grandchild ignores SIGTERM", "preprocess started")
    tree = descendants(supervisor)
    os.kill(supervisor, signal.SIGKILL)
    table.pid_file("triton-1").unlink()  # no record of it at all: its token is enough
    wait_until(lambda: len(running(tree)) == 1, WAIT_S, "all but the grandchild gone")
    assert "stopped triton-1" in down(tmp_path)
    left = naming(tmp_path)
    assert left == [], describe(left)


def test_down_stops_what_no_pid_file_names_any_more(tmp_path: Path) -> None:
    table = ProcessTable(tmp_path)
    table.start("triton", parent_of_one(), {})  # a name of an older layout of the stack
    logged(table, "triton", "parent started", "grandchild ignores SIGTERM")
    table.pid_file("triton").unlink()
    assert "stopped 2 more processes of this stack" in down(tmp_path)
    left = naming(tmp_path)
    assert left == [], describe(left)


def _parent(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_waiting_on_what_keeps_starting_short_lived_processes_ends_at_its_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each scan finds new processes, each gone before it is watched: the wait still ends."""
    fresh = iter(range(2**22 + 1, 2**23))  # past any pid_max: never a live process
    monkeypatch.setattr(
        reaper,
        "_marked",
        lambda claims: {(pid := next(fresh)): (reaper.Proc(pid, 1, pid, 0), claims[0])},
    )
    assert reaper.wait_gone([reaper.Claim(owner="x")], 0.2) is False
