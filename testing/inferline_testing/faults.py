"""One replica of a tier lost under load, measured: kill -9 (the process is gone) or SIGSTOP (it
hangs, its sockets open), with a closed loop of callers on the public endpoint throughout.

Shared by the fault test (tests/e2e/test_faults.py: one repetition per tier and fault, asserting
that no request failed) and ``make bench-faults`` (many repetitions, the table), so both measure
with one code. Every request sent is counted: when the load stops, the requests in flight finish
(each bounded by its deadline) instead of being abandoned, so a request that hung on the lost
replica shows up as the failure it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from demo_client.client import open_clients
from demo_client.load import LoadConfig, Outcome, running
from demo_client.stats import Recorder
from inferline_envoy import admin as envoy_admin
from inferline_stack import services
from inferline_stack.config import BATCHER, MIDDLEMAN, TRITON, StackConfig
from inferline_stack.processes import ProcessTable
from inferline_stack.replicas import running_replicas
from inferline_stack.services import HOST, replica_name
from inferline_testing import stack_cli
from inferline_testing.procfs import group_pids
from inferline_testing.waits import wait_for, wait_for_state

# The tiers a replica of which is lost, and the stack service each is a replica of. A GPU pod
# (Triton and the preprocess beside it) is lost whole, or only its Triton (the pod then stops
# too, as a pod whose container failed).
TIERS = {"middleman": MIDDLEMAN, "batcher": BATCHER, "gpu pod": TRITON, "triton": TRITON}
KILL, STOP = "kill -9", "SIGSTOP"
FAULTS = (KILL, STOP)
REPLICAS = 2  # of every tier: one is lost, the other serves
WAIT_S = 60.0  # generous: only bounds how long a broken run takes to fail
LOAD_BOUND_S = 3600.0  # leaving its block ends a closed loop: this only bounds it


@dataclass
class Load:
    """What a :func:`closed_loop` has seen so far."""

    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def answered(self) -> int:
        return sum(1 for o in self.outcomes if o.error is None)


@contextlib.asynccontextmanager
async def closed_loop(
    target: str, images: Sequence[bytes], concurrency: int = 8, timeout_s: float = 10.0
) -> AsyncIterator[Load]:
    """``concurrency`` callers (the demo client's closed loop), one request at a time each,
    while the block runs; on leaving, each caller finishes the request it has in flight (bounded
    by ``timeout_s``)."""
    load, recorder = Load(), Recorder(concurrency)
    config = LoadConfig(concurrency=concurrency, timeout_s=timeout_s, duration_s=LOAD_BOUND_S)
    hook = load.outcomes.append
    async with (
        open_clients(target, 2) as clients,
        running(clients, config, images, recorder, drain=True, on_outcome=hook),
    ):
        yield load


@dataclass(frozen=True)
class FaultRun:
    """One repetition: a replica of ``tier`` lost by ``fault`` under load."""

    tier: str
    fault: str
    requests: int
    failed: dict[str, int]  # status code name -> requests
    detected_s: float  # from the fault until Envoy sent the replica no new request
    slowest_s: float  # the slowest request sent while the replica was lost or before
    replica_requests: int  # requests Envoy had sent the replica when it was lost
    messages: dict[str, str] = field(default_factory=dict)  # status -> what its first one said

    def row(self) -> dict[str, object]:
        return {
            "tier": self.tier,
            "fault": self.fault,
            "requests": self.requests,
            "failed": sum(self.failed.values()),
            "failed_by_code": self.failed,
            "detected_s": round(self.detected_s, 3),
            "slowest_s": round(self.slowest_s, 3),
            "replica_requests": self.replica_requests,
            "messages": self.messages,
        }


def victims(tier: str, fault: str, pgid: int) -> list[int] | None:
    """The pids ``fault`` hits in the replica of ``tier`` whose process group is ``pgid``, or
    None for the whole group (:func:`strike` signals it at once): for ``triton`` the Triton
    server alone, and for a GPU pod that hangs its front door, the preprocess (Triton's Python
    backend, PyTriton's, crashes when resumed after a pause of seconds: a hang of the whole pod
    ends in a restart, another case)."""

    members = group_pids(pgid)
    if tier == "triton":
        chosen = [pid for pid in members if _argv(pid)[0].endswith("tritonserver")]
    elif tier == "gpu pod" and fault == STOP:
        chosen = [pid for pid in members if _argv(pid)[1:3] == ["-m", "preprocess"]]
    elif members:
        return None
    else:
        chosen = []
    if not chosen:
        raise AssertionError(f"nothing of {tier} to hit in process group {pgid}")
    return chosen


def _argv(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return [""]


def strike(pgid: int, pids: Sequence[int] | None, signum: int) -> None:
    """``signum`` to ``pids``, or to the whole process group ``pgid`` at once (None). A pod lost
    whole dies at once. Signalled one by one, its supervisor's death sent the rest SIGTERM
    (PR_SET_PDEATHSIG) before their own SIGKILL: they began a graceful stop, Envoy still
    sending, which is another fault (a CI run failed two requests CANCELLED at such a kill)."""
    if pids is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signum)
        return
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


async def routed(config: StackConfig, replica: services.Service) -> int:
    """Requests sent to ``replica`` (0: not there): Envoy's count, or for a cluster dialled
    proxyless (no Envoy in between) the ModelInfer calls the replica itself has taken."""
    if replica.cluster in config.proxyless_clusters:
        return await asyncio.to_thread(taken, replica)
    hosts = (await envoy_admin.clusters(config.admin_url)).get(replica.cluster or "", [])
    return next((h.rq_total for h in hosts if h.port == replica.port), 0)


def taken(replica: services.Service) -> int:
    """ModelInfer calls ``replica`` has handled, from its own /metrics."""
    name = f"inferline_{replica.name.rsplit('-', 1)[0]}_grpc_requests_total{{"
    try:
        with urllib.request.urlopen(replica.metrics, timeout=2) as answer:
            text = answer.read().decode()
    except OSError:
        return 0
    return int(
        sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name) and 'method="ModelInfer"' in line
        )
    )


async def with_replicas(config: StackConfig, replicas: int = REPLICAS) -> None:
    """Every tier at ``replicas`` (``make scale`` where one is not: a dead replica is replaced,
    one stopped by SIGSTOP is left to come back)."""
    table = ProcessTable(Path(config.run_dir))
    for service in dict.fromkeys(TIERS.values()):
        if running_replicas(table, service) != list(range(replicas)):
            await stack_cli.scale(config, service, replicas)


async def lose_one(
    config: StackConfig,
    tier: str,
    fault: str,
    images: Sequence[bytes],
    *,
    concurrency: int = 8,
    timeout_s: float = 10.0,
    after: int = 100,
) -> FaultRun:
    """Under a closed loop, lose replica 1 of ``tier`` by ``fault``; go on until Envoy sends it
    nothing new and ``after`` more requests were answered; then bring it back (kill -9: ``make
    scale`` starts a new one; SIGSTOP: SIGCONT, until Envoy routes to it again)."""
    service = TIERS[tier]
    replica = services.replica(config, service, 1)
    assert replica.cluster is not None
    cluster, port = replica.cluster, replica.port
    table = ProcessTable(Path(config.run_dir))
    pgid = table.pid(replica_name(service, 1))
    if pgid is None:
        raise AssertionError(f"{replica_name(service, 1)} is not running")
    loop = asyncio.get_running_loop()
    target = f"{HOST}:{config.public_port}"
    proxyless = cluster in config.proxyless_clusters
    async with closed_loop(target, images, concurrency, timeout_s) as load:
        start = await routed(config, replica)

        async def replica_busy() -> bool:  # it has work when it is lost
            return await routed(config, replica) >= start + 5 and load.answered >= 20

        await wait_for(replica_busy, WAIT_S, f"requests at {replica.name}")
        hit = victims(tier, fault, pgid)
        served = await routed(config, replica)
        lost = loop.time()
        answered = load.answered
        strike(pgid, hit, signal.SIGKILL if fault == KILL else signal.SIGSTOP)
        if proxyless:  # no Envoy to ask: detected once the callers are answered again
            await wait_for_state(
                lambda: load.answered >= answered + concurrency, WAIT_S, "answers after the loss"
            )
        else:
            await envoy_admin.wait_gone(config.admin_url, cluster, HOST, port, WAIT_S)
        detected = loop.time() - lost
        answered = load.answered
        await wait_for_state(
            lambda: load.answered >= answered + after, WAIT_S, f"{after} answers after the loss"
        )
    if fault == STOP:
        strike(pgid, hit, signal.SIGCONT)
        if proxyless:

            async def serving_again() -> bool:
                return await routed(config, replica) > served

            async with closed_loop(target, images, concurrency, timeout_s):
                await wait_for(serving_again, WAIT_S, f"requests at {replica.name} again")
        else:
            await envoy_admin.wait_routable(config.admin_url, cluster, HOST, port, WAIT_S)
    else:  # a pod whose Triton died stops itself, gracefully: replaced once it is gone (as the
        # stack sees it: its process; what its Triton leaves behind, `make scale` frees)
        name = replica_name(service, 1)
        await wait_for_state(lambda: not table.running(name), WAIT_S, f"{name} to exit")
        await with_replicas(config)
    failures = [(o.error, o.message) for o in load.outcomes if o.error is not None]
    failed = Counter(error for error, _ in failures)
    return FaultRun(
        tier=tier,
        fault=fault,
        requests=len(load.outcomes),
        failed=dict(failed),
        detected_s=detected,
        slowest_s=max(o.latency_s for o in load.outcomes),
        replica_requests=served,
        messages=dict(reversed(failures)),  # the first of each status
    )


def table(runs: Sequence[FaultRun]) -> str:
    """The runs by tier and fault: repetitions, requests, failures, detection and the slowest
    request, as ``make bench-faults`` prints them."""
    lines = [
        f"{'tier':<10}{'fault':<9}{'reps':>5}{'requests':>10}{'failed':>8}{'reps failing':>14}"
        f"{'detected p50 / max s':>22}{'slowest s':>11}"
    ]
    groups: dict[tuple[str, str], list[FaultRun]] = {}
    for run in runs:
        groups.setdefault((run.tier, run.fault), []).append(run)
    for (tier, fault), group in groups.items():
        detected = sorted(r.detected_s for r in group)
        failed = [sum(r.failed.values()) for r in group]
        codes = Counter[str]()
        for run in group:
            codes.update(run.failed)
        lines.append(
            f"{tier:<10}{fault:<9}{len(group):>5}{sum(r.requests for r in group):>10}"
            f"{sum(failed):>8}{sum(1 for f in failed if f):>14}"
            f"{detected[len(detected) // 2]:>13.2f} / {detected[-1]:<6.2f}"
            f"{max(r.slowest_s for r in group):>11.2f}"
            + (f"  failed {dict(codes)}" if codes else "")
        )
    return "\n".join(lines)
