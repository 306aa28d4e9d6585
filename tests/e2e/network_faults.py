"""The network-fault tests' rig (issue 14): the real Envoy, rendered from the one template, in
front of real Triton replicas (PyTriton serving the *simulated* GPU model), each replica in a
network namespace of its own behind a veth pair; the control plane reads an endpoints file and
feeds Envoy over ADS. A closed-loop load (every request with a deadline of :data:`DEADLINE_S`)
goes through Envoy's Triton listener the whole time.

Needs root and iproute2 (the tests skip without them; CI requires them).
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from demo_client.client import open_clients
from demo_client.load import LoadConfig, Outcome, running, tensor_requests
from demo_client.stats import Recorder
from eds.cache import Endpoint, Health
from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin
from inferline_models.repository import INPUT_NAME, OUTPUT_NAME
from inferline_stack import health
from inferline_stack.processes import kill_group
from inferline_testing import netns
from inferline_testing.harness import (
    EdsProcess,
    EnvoyProcess,
    Process,
    envoy_params,
    percentile,
    python,
)
from inferline_testing.ports import free_port
from inferline_testing.waits import wait_for, wait_for_state

CLUSTER = "triton"
MODEL = "simulated_gpu"
DEADLINE_S = 10.0  # every request's own deadline (grpc-timeout)
DELAY_MS = 200.0
CONCURRENCY = 8
START_S = 120.0  # a Triton replica starting on a busy small machine
WAIT_S = 30.0  # generous bounds: only how long a broken run takes to fail
WINDOW = 300  # requests per measured phase
LOAD_BOUND_S = 3600.0  # leaving its block ends the load: this only bounds it
# Every request: one black image, as the model takes it (uint8 pixels, [1, 3, 224, 224]).
REQUESTS = tensor_requests(INPUT_NAME, np.zeros((1, 3, 224, 224), np.uint8), OUTPUT_NAME)


class Replica(Process):
    """A simulated-GPU Triton replica inside ``ns``, reached at the namespace's address."""

    def __init__(self, run_dir: Path, ns: netns.Namespace, name: str) -> None:
        self.ns, self.port = ns, free_port()
        # PyTriton's sockets live in its workspace: a short path (AF_UNIX allows 108 bytes).
        self.workspace = Path(tempfile.gettempdir()) / f"inferline-{name}-{ns.name}"
        argv = python(
            "inferline_models.triton",
            f"--model={MODEL}",
            "--address=0.0.0.0",  # the namespace's own loopback and veth: nothing else
            f"--grpc-port={self.port}",
            f"--http-port={free_port()}",
            f"--metrics-port={free_port()}",
            f"--workspace={self.workspace}",
        )
        env = {"INFERLINE_LOG_LEVEL": "WARNING"}
        super().__init__(name, ns.argv(argv), run_dir / "logs" / f"{name}.log", env)

    @property
    def address(self) -> str:
        return f"{self.ns.address}:{self.port}"

    def endpoint(self, health_: Health = Health.HEALTHY) -> Endpoint:
        return Endpoint(self.ns.address, self.port, health_, 1, "local", self.name)

    async def start_ready(self) -> None:
        await self.start()

        async def ready() -> bool:
            return await asyncio.to_thread(health.ready, self.address, MODEL)

        await wait_for(ready, START_S, f"{self.name} ready", abort=self.exited)

    async def stop(self, grace_s: float = 10.0) -> int | None:
        code = await super().stop(grace_s)
        if self.proc is not None:
            kill_group(self.proc.pid)  # PyTriton's Triton server, in the same group
        shutil.rmtree(self.workspace, ignore_errors=True)
        return code


@dataclass
class Load:
    """What the closed loop through Envoy has seen so far (``sent``: loop time, which is
    ``time.monotonic()``)."""

    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error is not None]

    def failures(self) -> list[tuple[str | None, int]]:
        """Each failed request's status and milliseconds, as a failed assertion shows them."""
        return [(o.error, round(o.latency_s * 1000)) for o in self.failed]

    def since(self, start: float) -> list[Outcome]:
        """Those sent at ``start`` or later."""
        return [o for o in self.outcomes if o.sent >= start]

    def ended(self, moment: float) -> list[Outcome]:
        """Those that ended at ``moment`` or later (in flight then, or sent since)."""
        return [o for o in self.outcomes if o.sent + o.latency_s >= moment]

    async def flowing(self, requests: int = 50, timeout_s: float = WAIT_S) -> None:
        target = len(self.outcomes) + requests
        await wait_for_state(lambda: len(self.outcomes) >= target, timeout_s, f"{requests} more")


@contextlib.asynccontextmanager
async def load(target: str) -> AsyncIterator[Load]:
    """The demo client's closed loop on ``target`` while the block runs: :data:`CONCURRENCY`
    callers, each request a black image with the deadline :data:`DEADLINE_S`; on leaving, each
    caller finishes its request in flight (within its deadline)."""
    traffic, recorder = Load(), Recorder(CONCURRENCY)
    config = LoadConfig(
        model=MODEL, concurrency=CONCURRENCY, timeout_s=DEADLINE_S, duration_s=LOAD_BOUND_S
    )
    hook = traffic.outcomes.append
    async with (
        open_clients(target) as clients,
        running(clients, config, REQUESTS, recorder, drain=True, on_outcome=hook),
    ):
        yield traffic


@dataclass
class Rig:
    run_dir: Path
    endpoints: Path
    eds: EdsProcess
    envoy: EnvoyProcess

    @property
    def admin(self) -> str:
        return self.envoy.admin

    async def host(self, address: str, port: int) -> envoy_admin.HostStatus | None:
        return await envoy_admin.endpoint(self.admin, CLUSTER, address, port)

    async def announce(self, *replicas: Replica) -> None:
        for replica in replicas:
            endpoints_file.set_endpoint(self.endpoints, CLUSTER, replica.endpoint())
        for replica in replicas:
            await envoy_admin.wait_routable(
                self.admin, CLUSTER, replica.ns.address, replica.port, WAIT_S
            )


@contextlib.contextmanager
def namespaces(*labels: str) -> Iterator[list[netns.Namespace]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(netns.namespace(label)) for label in labels]


@contextlib.asynccontextmanager
async def rig(tmp_path: Path, eds_ns: netns.Namespace | None = None) -> AsyncIterator[Rig]:
    """The control plane (in ``eds_ns`` if given) and Envoy with a Triton listener."""
    endpoints = tmp_path / "endpoints.yaml"
    endpoints_file.write(endpoints, {CLUSTER: []})
    if eds_ns is None:
        eds = EdsProcess(tmp_path, endpoints, [CLUSTER])
    else:
        eds = EdsProcess(
            tmp_path, endpoints, [CLUSTER], host=eds_ns.address, prefix=eds_ns.argv([])
        )
    envoy = EnvoyProcess(tmp_path, envoy_params(eds.port, [CLUSTER], xds_host=eds.host))
    try:
        await eds.start_ready()
        await envoy.start_ready()
        yield Rig(tmp_path, endpoints, eds, envoy)
    finally:
        await envoy.stop(5.0)
        await eds.stop(5.0)


async def start(*replicas: Replica) -> None:
    await asyncio.gather(*(r.start_ready() for r in replicas))


def latencies(outcomes: list[Outcome]) -> str:
    ms = [o.latency_s * 1000.0 for o in outcomes if o.error is None]
    return f"p50 {percentile(ms, 50):.0f} ms, p99 {percentile(ms, 99):.0f} ms"
