"""The local stack scales under load: the real Envoy and control plane, middleman, the batcher
and Triton replicas, with the demo client's load on the public endpoint the whole time.

Triton serves the *simulated* GPU model (``simulated_gpu``: the real Triton server, a model
that sleeps for its batch time instead of computing), so four replicas fit on two cores; its
answers are not a real classification. Scaling goes through the CLI, as ``make scale`` does;
the test watches the endpoints file and Envoy's admin API while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from demo_client.client import open_clients
from demo_client.load import LoadConfig, run_load
from demo_client.stats import Recorder
from eds.cache import Health
from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin
from inferline_envoy import config as envoy_config
from inferline_stack.config import TRITON, StackConfig
from inferline_stack.processes import ProcessTable, group_alive, kill_group
from inferline_stack.services import HOST, endpoints_path
from inferline_stack.stack import down, up
from inferline_testing import media
from inferline_testing.ports import config_on_free_ports

pytestmark = pytest.mark.e2e

CONVERGENCE_GOAL_S = 1.0  # announced (HEALTHY in the endpoints file) -> Envoy's first request
# A dead backend fails `unhealthy_threshold` health checks `interval` apart, each taking at
# most `timeout`; outlier detection usually takes it out sooner (failed connections).
LOCAL = envoy_config.LOCAL
HC_WINDOW_S = (
    LOCAL.health_check_interval_s * LOCAL.unhealthy_threshold + LOCAL.health_check_timeout_s
)
CONCURRENCY = 8
POLL_S = 0.025


@pytest.fixture(scope="module")
def scaling_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackConfig]:
    """Its own stack on free ports: simulated GPU, batcher, middleman decoding in process."""
    config = config_on_free_ports(
        tmp_path_factory.mktemp("scaling"), model="simulated_gpu", decode="inprocess"
    )
    table = ProcessTable(Path(config.run_dir))
    if up(config, table) != 0:
        pytest.fail("the simulated-GPU stack did not start; see the log tail above")
    yield config
    down(config, table)


def images() -> list[bytes]:
    """Small real JPEGs: decoding them costs little; the tensors are full size (224²)."""
    return [media.encode(media.photo(name)[:96, :128]) for name in ("chelsea", "coffee")]


@contextlib.asynccontextmanager
async def load(target: str) -> AsyncIterator[Recorder]:
    """The demo client's closed-loop load on ``target`` while the block runs."""
    recorder = Recorder(concurrency=CONCURRENCY)
    stop = asyncio.Event()
    config = LoadConfig(concurrency=CONCURRENCY, timeout_s=30.0, duration_s=3600.0)
    async with open_clients(target, 2) as clients:
        task = asyncio.create_task(run_load(clients, config, images(), recorder, stop))
        try:
            yield recorder
        finally:
            stop.set()
            await task


async def flowing(recorder: Recorder, requests: int = 50, timeout_s: float = 20.0) -> None:
    """Wait until ``requests`` more requests have finished."""
    target = recorder.requests + requests
    deadline = time.monotonic() + timeout_s
    while recorder.requests < target:
        assert time.monotonic() < deadline, f"load stalled at {recorder.requests} requests"
        await asyncio.sleep(POLL_S)


@dataclass
class Watch:
    """Polls the endpoints file and Envoy's admin API: when each Triton endpoint was
    announced (HEALTHY in the file) and when Envoy first sent it a request."""

    config: StackConfig
    announced: dict[int, float] = field(default_factory=dict)
    first_request: dict[int, float] = field(default_factory=dict)

    async def run(self) -> None:
        path = endpoints_path(self.config)
        while True:
            now = time.monotonic()
            for e in endpoints_file.load(path).get(TRITON, ()):
                if e.health == Health.HEALTHY:
                    self.announced.setdefault(e.port, now)
            hosts = (await envoy_admin.clusters(self.config.admin_url)).get(TRITON, [])
            now = time.monotonic()
            for h in hosts:
                if h.rq_total > 0:
                    self.first_request.setdefault(h.port, now)
            await asyncio.sleep(POLL_S)

    def convergence(self, port: int) -> float | None:
        if port not in self.announced or port not in self.first_request:
            return None
        return max(0.0, self.first_request[port] - self.announced[port])


async def cli(config: StackConfig, *args: str) -> str:
    """``python -m inferline_stack ARGS`` with this stack's configuration (what ``make`` runs)."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "inferline_stack", *args),
        env={**os.environ, **config.environ()},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    text = out.decode(errors="replace")
    print(text)
    assert proc.returncode == 0, text
    return text


async def scale(config: StackConfig, replicas: int) -> str:
    """``make scale SERVICE=triton REPLICAS=n``."""
    return await cli(config, "scale", "--service", TRITON, "--replicas", str(replicas))


async def triton_hosts(config: StackConfig) -> dict[int, envoy_admin.HostStatus]:
    hosts = (await envoy_admin.clusters(config.admin_url)).get(TRITON, [])
    return {h.port: h for h in hosts}


async def envoy_has(config: StackConfig, ports: set[int], timeout_s: float = 2.0) -> None:
    """Until Envoy's triton cluster is exactly ``ports`` (a removal reaches it in a poll)."""
    deadline = time.monotonic() + timeout_s
    while set(await triton_hosts(config)) != ports:
        assert time.monotonic() < deadline, f"Envoy has {set(await triton_hosts(config))}"
        await asyncio.sleep(POLL_S)


def triton_port(config: StackConfig, index: int) -> int:
    return config.replica_ports(TRITON, index)[0]


def shared_memory_of(pid: int) -> list[Path]:
    """PyTriton's shared memory regions of the process ``pid``."""
    return list(Path("/dev/shm").glob(f"pytrtion{pid}-*"))


async def test_scale_triton_1_2_4_2_1_under_load(scaling_stack: StackConfig) -> None:
    config = scaling_stack
    watch = Watch(config)
    watcher = asyncio.create_task(watch.run())
    rates: list[tuple[int, float]] = []  # (replicas, images/s)
    try:
        async with load(f"127.0.0.1:{config.public_port}") as recorder:
            await flowing(recorder)
            for replicas in (2, 4, 2, 1):
                await scale(config, replicas)
                expected = {triton_port(config, i) for i in range(replicas)}
                await envoy_has(config, expected)
                before, started = recorder.images, time.monotonic()
                await flowing(recorder, 100)
                rate = (recorder.images - before) / (time.monotonic() - started)
                rates.append((replicas, round(rate, 1)))
                if replicas == 4:  # `make status` shows Envoy's view of the four
                    envoy_view = (await cli(config, "status")).split("Envoy's view")[1]
                    rows = [r for r in envoy_view.splitlines() if r.startswith("triton ")]
                    assert len(rows) == 4 and all("healthy" in r for r in rows), envoy_view
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    summary = recorder.summary()
    new_ports = [triton_port(config, i) for i in (1, 2, 3)]
    convergence = {port: watch.convergence(port) for port in new_ports}
    print(f"convergence (s) {convergence}; (replicas, images/s) {rates}; {summary}")
    assert summary.errors == 0, recorder.errors_by_code
    for port, took in convergence.items():
        assert took is not None and took <= CONVERGENCE_GOAL_S, (port, convergence)
    listed = endpoints_file.load(endpoints_path(config))[TRITON]
    assert [(e.name, e.port, e.health) for e in listed] == [
        ("triton-0", triton_port(config, 0), Health.HEALTHY)
    ]


async def test_two_replicas_share_the_load(scaling_stack: StackConfig) -> None:
    config = scaling_stack
    await scale(config, 2)
    ports = [triton_port(config, i) for i in (0, 1)]
    async with load(f"127.0.0.1:{config.public_port}") as recorder:
        await flowing(recorder, 20)
        before = await triton_hosts(config)
        await flowing(recorder, 300)
        after = await triton_hosts(config)
    served = {p: after[p].rq_total - before[p].rq_total for p in ports}
    print(f"requests per Triton replica: {served}")
    assert recorder.errors == 0, recorder.errors_by_code
    assert min(served.values()) >= 0.25 * sum(served.values()), served


async def test_kill_9_a_triton_replica_under_load(scaling_stack: StackConfig) -> None:
    config = scaling_stack
    table = ProcessTable(Path(config.run_dir))
    await scale(config, 2)  # no-op after the previous test, else starts triton-1
    port = triton_port(config, 1)
    pgid = table.pid("triton-1")
    assert pgid is not None
    async with load(f"127.0.0.1:{config.public_port}") as recorder:
        await flowing(recorder, 100)
        served = (await triton_hosts(config))[port].rq_total
        killed = time.monotonic()
        kill_group(pgid)  # kill -9 of Triton, its server and its model stubs
        await envoy_admin.wait_gone(config.admin_url, TRITON, HOST, port, HC_WINDOW_S + 1)
        left_after_s = time.monotonic() - killed
        await envoy_admin.wait_host(
            config.admin_url, TRITON, HOST, port,
            lambda h: h is not None and "failed_active_health_check" in h.flags,
            HC_WINDOW_S + 1, "failing its health checks",
        )  # fmt: skip
        failed_hc_after_s = time.monotonic() - killed
        await flowing(recorder, 200)
    assert shared_memory_of(pgid)  # kill -9 leaves PyTriton's shared memory behind...
    print(
        f"triton-1 had served {served} requests; out of rotation {left_after_s:.2f}s after "
        f"kill -9, failing health checks after {failed_hc_after_s:.2f}s; {recorder.summary()}"
    )
    assert recorder.errors == 0, recorder.errors_by_code  # Envoy retried on triton-0
    assert left_after_s <= HC_WINDOW_S
    assert failed_hc_after_s <= HC_WINDOW_S + 0.5
    assert not group_alive(pgid)
    out = await scale(config, 1)  # the dead replica leaves the endpoints file
    assert "triton-1 was not running" in out
    await envoy_has(config, {triton_port(config, 0)})
    assert shared_memory_of(pgid) == []  # ...which the next `make scale` frees


def test_down_leaves_no_process_behind(scaling_stack: StackConfig) -> None:
    table = ProcessTable(Path(scaling_stack.run_dir))
    groups = [pid for name in table.names() if (pid := table.pid(name)) is not None]
    assert len(groups) >= 4  # eds, envoy, triton-0, batcher-0, middleman-0
    down(scaling_stack, table)
    assert [pgid for pgid in groups if group_alive(pgid)] == []
    assert table.names() == []
