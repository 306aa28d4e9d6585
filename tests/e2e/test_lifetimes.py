"""Nothing of the local stack outlives its supervisor: as a pod's containers in Kubernetes, a GPU
pod's processes live and die together, and ``make down`` leaves no process of the stack.

Each test runs a stack of its own (the real Triton server through PyTriton, serving the
*simulated* GPU model; Envoy, the control plane, the batcher, middleman), kills one supervising
process alone with SIGKILL, waits until everything it supervised (children and grandchildren,
as /proc showed them before the kill) is gone, then runs ``make down`` (``python -m
inferline_stack down``, from another shell) and checks that no process names the stack's run
folder (every process of the stack inherits an environment that does). The supervisors: the GPU
pod's (``python -m inferline_stack.pod``: PyTriton and the preprocess), PyTriton's process (its
``tritonserver``), ``tritonserver`` (its Python backend stubs). And after a GPU pod's supervisor
was killed alone, ``make scale`` brings back a replica that works, on the same ports. And a
test session stopped by SIGTERM leaves nothing either (:mod:`inferline_testing.owned_session`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from inferline_envoy import admin as envoy_admin
from inferline_stack.config import IN_POD, IN_PROCESS, TRITON, StackConfig
from inferline_stack.processes import ProcessTable
from inferline_stack.services import replica
from inferline_testing import media, stack_cli
from inferline_testing.harness import load
from inferline_testing.procfs import descendants, describe, naming, running
from inferline_testing.stacks import own_stack
from inferline_testing.waits import wait_for, wait_for_state, wait_until

pytestmark = pytest.mark.e2e

WAIT_S = 60.0  # generous: only bounds how long a broken run takes to fail


@pytest.fixture
def lifetimes_stack(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[StackConfig]:
    """A stack of the test's own, in ``request.param``'s placement (in-pod by default); in a
    folder with a short name (a test's own is too long for PyTriton's sockets in it)."""
    placement = getattr(request, "param", IN_POD)
    with own_stack(
        tmp_path_factory.mktemp("lifetimes"), "lifetimes",
        model="simulated_gpu", prometheus=False, placement=placement,
    ) as config:  # fmt: skip
        yield config


def argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def pytriton(pids: list[int]) -> int:
    return next(p for p in pids if argv(p)[1:3] == ["-m", "inferline_models.triton"])


def tritonserver(pids: list[int]) -> int:
    return next(p for p in pids if argv(p)[0].endswith("/tritonserver"))


def stubs(pids: list[int]) -> list[int]:
    return [p for p in pids if argv(p)[0].endswith("/triton_python_backend_stub")]


def leader(pids: list[int]) -> int:
    return pids[0]


# (the placement, which process of replica triton-0 is killed: from [its leader, *descendants])
SUPERVISORS: dict[str, tuple[str, Callable[[list[int]], int]]] = {
    "the GPU pod's supervisor": (IN_POD, leader),
    "PyTriton's process in a GPU pod": (IN_POD, pytriton),
    "PyTriton's process alone": (IN_PROCESS, leader),
    "tritonserver": (IN_POD, tritonserver),
}


@pytest.mark.parametrize(
    ("lifetimes_stack", "victim"),
    [pytest.param(placement, pick, id=name) for name, (placement, pick) in SUPERVISORS.items()],
    indirect=["lifetimes_stack"],
)
async def test_kill_9_of_a_supervisor_alone_takes_all_it_supervised_and_down_leaves_nothing(
    lifetimes_stack: StackConfig, victim: Callable[[list[int]], int]
) -> None:
    config = lifetimes_stack
    table = ProcessTable(Path(config.run_dir))
    first = table.pid("triton-0")
    assert first is not None
    replica_tree = [first, *descendants(first)]
    assert stubs(replica_tree), describe(replica_tree)  # a model stub: a grandchild at least
    killed = victim(replica_tree)
    supervised = descendants(killed)
    assert supervised, describe(replica_tree)
    os.kill(killed, signal.SIGKILL)

    def what_runs() -> str | None:  # None once all of it has gone
        left = running(supervised)
        return describe(left) if left else None

    await wait_for_state(lambda: what_runs() is None, WAIT_S, "all it supervised gone")
    # A supervisor in a GPU pod gone, the pod stops the rest of itself (a pod that failed).
    await wait_for_state(lambda: not running(replica_tree), WAIT_S, "all of triton-0 gone")
    code, out = await stack_cli.another_shell(config, "down")
    assert code == 0, out
    left = naming(config.run_dir)
    assert left == [], describe(left)


async def test_scale_brings_back_a_working_replica_after_kill_9_of_its_pods_supervisor(
    lifetimes_stack: StackConfig,
) -> None:
    """The issue's case: a GPU pod's supervisor killed alone, then ``make scale SERVICE=triton
    REPLICAS=2``: a second replica that works, on the ports of the one killed."""
    config = lifetimes_stack
    table = ProcessTable(Path(config.run_dir))
    await stack_cli.scale(config, TRITON, 2)
    pod = table.pid("triton-1")
    assert pod is not None
    tree = [pod, *descendants(pod)]
    os.kill(pod, signal.SIGKILL)
    await wait_for_state(lambda: not running([pod]), WAIT_S, "the pod's supervisor gone")
    out = await stack_cli.scale(config, TRITON, 2)  # at once: what the pod left may still run
    assert "triton-1 was not running" in out and "triton: 1 → 2 replicas" in out, out
    assert not running(tree), describe(running(tree))
    port = replica(config, TRITON, 1).port
    image = media.encode(media.photo("chelsea")[:96, :128])
    async with load(f"127.0.0.1:{config.public_port}", concurrency=4, images=[image]) as recorder:

        async def served() -> bool:
            hosts = (await envoy_admin.clusters(config.admin_url)).get(TRITON, [])
            return any(h.port == port and h.rq_total > 0 for h in hosts)

        await wait_for(served, WAIT_S, "requests at the new triton-1")
    assert recorder.errors == 0, recorder.errors_by_code


# A test that starts a stack of its own and a fake backend it never stops, then blocks until
# its session is stopped.
STOPPED_SESSION = """
import asyncio, os, threading
from pathlib import Path

from inferline_testing.harness import FakeBackend
from inferline_testing.stacks import own_stack


def test_until_stopped():
    run = Path(os.environ["RUN"])
    asyncio.run(FakeBackend(run, "never-stopped").start_ready())
    with own_stack(run, "stopped", model="simulated_gpu", prometheus=False):
        threading.Event().wait()
"""


def test_a_test_session_stopped_by_sigterm_leaves_no_process(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    folder = tmp_path_factory.mktemp("session")
    run = folder / "run"
    (folder / "test_stopped.py").write_text(STOPPED_SESSION)
    argv = [sys.executable, "-m", "pytest", "-p", "inferline_testing.owned_session"]
    argv += ["-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(folder), str(folder)]
    with (folder / "pytest.log").open("wb") as log:
        session = subprocess.Popen(
            argv, env={**os.environ, "RUN": str(run)}, stdout=log, stderr=subprocess.STDOUT
        )
    try:

        def exited() -> str | None:
            return None if session.poll() is None else f"pytest exited {session.returncode}"

        wait_until(
            lambda: ProcessTable(run).running("middleman-0"), WAIT_S, "its stack up", abort=exited
        )
        session.send_signal(signal.SIGTERM)
        assert session.wait(WAIT_S) == pytest.ExitCode.INTERRUPTED
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
    left = naming(run)
    assert left == [], describe(left)
