"""The local stack scales under load: the real Envoy and control plane, middleman, the batcher
and Triton replicas, with the demo client's load on the public endpoint the whole time.

Triton serves the *simulated* GPU model (``simulated_gpu``: the real Triton server, a model
that sleeps for its batch time instead of computing), so four replicas fit on two cores; its
answers are not a real classification. Scaling goes through the CLI, as ``make scale`` does;
the test watches the endpoints file and Envoy's admin API while it runs.

Every test starts from the same state, whatever ran before it: the stack up (``up`` is
idempotent; it starts again what a test took down) with one Triton replica. How fast a new
replica gets its first request, or a dead one leaves Envoy's rotation, is printed (``-s``),
not asserted: ``make bench-eds`` measures it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from eds.cache import Health
from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin
from inferline_stack import leftovers, services
from inferline_stack.config import TRITON, StackConfig
from inferline_stack.processes import ProcessTable, group_alive, kill_group
from inferline_stack.prometheus import PROMETHEUS, binary
from inferline_stack.replicas import scale as scale_in_process
from inferline_stack.services import EDS, ENVOY, HOST, endpoints_path, replica_name
from inferline_stack.stack import down, up
from inferline_testing import media, stack_cli
from inferline_testing.harness import flowing, load
from inferline_testing.ports import config_on_free_ports
from inferline_testing.procfs import group_pids, shared_memory
from inferline_testing.prometheus import query, series, tool
from inferline_testing.stacks import GPU_BOUND
from inferline_testing.waits import wait_for, wait_for_state

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CONCURRENCY = 8
WAIT_S = 60.0  # generous: only bounds how long a broken run takes to fail


@pytest.fixture(scope="module")
def scaling_config(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackConfig]:
    """Its own stack's configuration on free ports: simulated GPU, batcher, the default in-pod
    placement (each Triton replica a GPU pod with its preprocess). Stopped after the module's
    last test."""
    config = config_on_free_ports(
        tmp_path_factory.mktemp("scaling"),
        **GPU_BOUND,
        prometheus_config=str(ROOT / "grafana" / "prometheus" / "prometheus.yml"),
        scrape_interval_s=1.0,
    )
    yield config
    down(config, ProcessTable(Path(config.run_dir)))


@pytest.fixture
def scaling_stack(scaling_config: StackConfig) -> StackConfig:
    """The stack up with one Triton replica, whatever the previous test left."""
    table = ProcessTable(Path(scaling_config.run_dir))
    if up(scaling_config, table) != 0:
        pytest.fail("the simulated-GPU stack did not start; see the log tail above")
    if scale_in_process(scaling_config, table, TRITON, 1) != 0:
        pytest.fail("the simulated-GPU stack did not scale to one Triton replica")
    return scaling_config


def images() -> list[bytes]:
    """Small real JPEGs: decoding them costs little; the tensors are full size (224²)."""
    return [media.encode(media.photo(name)[:96, :128]) for name in ("chelsea", "coffee")]


def public(config: StackConfig) -> str:
    return f"127.0.0.1:{config.public_port}"


async def scale(config: StackConfig, replicas: int) -> str:
    """``make scale SERVICE=triton REPLICAS=n``."""
    return await stack_cli.scale(config, TRITON, replicas)


async def triton_hosts(config: StackConfig) -> dict[int, envoy_admin.HostStatus]:
    hosts = (await envoy_admin.clusters(config.admin_url)).get(TRITON, [])
    return {h.port: h for h in hosts}


async def envoy_has(config: StackConfig, ports: set[int]) -> None:
    """Until Envoy's triton cluster is exactly ``ports`` (a removal reaches it in a poll)."""

    async def exactly() -> bool:
        return set(await triton_hosts(config)) == ports

    await wait_for(exactly, WAIT_S, f"Envoy's triton cluster to be {sorted(ports)}")


async def served_by_all(config: StackConfig, ports: set[int]) -> None:
    """Until Envoy has sent requests to each of ``ports``."""

    async def all_served() -> bool:
        hosts = await triton_hosts(config)
        return all(port in hosts and hosts[port].rq_total > 0 for port in ports)

    await wait_for(all_served, WAIT_S, f"requests at each of {sorted(ports)}")


def triton_port(config: StackConfig, index: int) -> int:
    """Where Envoy reaches Triton replica ``index`` (in-pod: the preprocess beside it)."""
    return services.replica(config, TRITON, index).port


def triton_leftovers(config: StackConfig, table: ProcessTable) -> tuple[set[Path], list[Path]]:
    """The shared memory every Triton replica maps, and their PyTriton workspaces."""
    names = [n for n in table.names() if n.startswith(f"{TRITON}-")]
    pids = [p for n in names if (g := table.pid(n)) is not None for p in group_pids(g)]
    return shared_memory(pids), [leftovers.workspace(config.run_dir, n) for n in names]


async def test_scale_triton_1_2_4_2_1_under_load(scaling_stack: StackConfig) -> None:
    config = scaling_stack
    rates: list[tuple[int, float]] = []  # (replicas, images/s), reported
    first_requests: dict[int, float] = {}  # new replica's port: s from `scale` to it, reported
    async with load(
        public(config), concurrency=CONCURRENCY, timeout_s=30.0, images=images()
    ) as recorder:
        await flowing(recorder)
        for replicas in (2, 4, 2, 1):
            had = set(await triton_hosts(config))
            await scale(config, replicas)
            scaled = time.monotonic()
            expected = {triton_port(config, i) for i in range(replicas)}
            await envoy_has(config, expected)
            new = expected - had
            await served_by_all(config, new)  # Envoy sends each new replica requests
            first_requests.update(dict.fromkeys(new, round(time.monotonic() - scaled, 3)))
            before, started = recorder.images, time.monotonic()
            await flowing(recorder, 100)
            rates.append(
                (replicas, round((recorder.images - before) / (time.monotonic() - started), 1))
            )
            if replicas == 4:  # `make status` shows Envoy's view of the four
                envoy_view = (await stack_cli.cli(config, "status")).split("Envoy's view")[1]
                rows = [r for r in envoy_view.splitlines() if r.startswith("triton ")]
                assert len(rows) == 4 and all("healthy" in r for r in rows), envoy_view
    summary = recorder.summary()
    print(f"scaled -> first request (s) {first_requests}; (replicas, images/s) {rates}; {summary}")
    assert summary.errors == 0, recorder.errors_by_code
    listed = endpoints_file.load(endpoints_path(config))[TRITON]
    assert [(e.name, e.port, e.health) for e in listed] == [
        ("triton-0", triton_port(config, 0), Health.HEALTHY)
    ]


async def test_two_replicas_share_the_load(scaling_stack: StackConfig) -> None:
    config = scaling_stack
    await scale(config, 2)
    ports = [triton_port(config, i) for i in (0, 1)]
    async with load(
        public(config), concurrency=CONCURRENCY, timeout_s=30.0, images=images()
    ) as recorder:
        await served_by_all(config, set(ports))
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
    await scale(config, 2)  # starts triton-1
    port = triton_port(config, 1)
    pgid = table.pid("triton-1")
    assert pgid is not None
    async with load(
        public(config), concurrency=CONCURRENCY, timeout_s=30.0, images=images()
    ) as recorder:
        await served_by_all(config, {port})  # it has work when it dies
        await flowing(recorder, 100)
        segments = shared_memory(group_pids(pgid))
        workspace = leftovers.workspace(config.run_dir, "triton-1")
        assert segments and workspace.is_dir()
        served = (await triton_hosts(config))[port].rq_total
        killed = time.monotonic()
        kill_group(pgid)  # kill -9 of Triton, its server and its model stubs
        await envoy_admin.wait_gone(config.admin_url, TRITON, HOST, port, WAIT_S)
        left_after_s = time.monotonic() - killed
        await envoy_admin.wait_host(
            config.admin_url, TRITON, HOST, port,
            lambda h: h is not None and "failed_active_health_check" in h.flags,
            WAIT_S, "failing its health checks",
        )  # fmt: skip
        failed_hc_after_s = time.monotonic() - killed
        await flowing(recorder, 200)  # and the load goes on, on triton-0
    # kill -9 leaves PyTriton's shared memory (not asserted: any stack's sweep on this machine,
    # another test worker's, may free it first, as nobody maps it) and its workspace behind...
    assert workspace.is_dir()
    print(
        f"triton-1 had served {served} requests; out of rotation {left_after_s:.2f}s after "
        f"kill -9, failing health checks after {failed_hc_after_s:.2f}s; {recorder.summary()}"
    )
    assert recorder.errors == 0, recorder.errors_by_code  # Envoy retried on triton-0
    # Gone: a SIGKILLed process exists until its memory is torn down and it is reaped (for
    # Triton's gigabytes, a moment after the load has already moved on).
    await wait_for_state(lambda: not group_alive(pgid), WAIT_S, "triton-1's processes gone")
    out = await scale(config, 1)  # the dead replica leaves the endpoints file
    assert "triton-1 was not running" in out
    await envoy_has(config, {triton_port(config, 0)})
    assert [p for p in segments if p.exists()] == []  # ...which the next `make scale` frees
    assert not workspace.exists()


def ring_inodes(config: StackConfig, replica: str) -> dict[Path, int]:
    """The slots of ``replica``'s shared-memory ring, by inode (a new ring has new ones)."""
    prefix = services.shm_prefix(config, replica)
    return {p: p.stat().st_ino for p in Path("/dev/shm").glob(f"{prefix}-*")}


def pod_preprocess(pgid: int) -> int:
    """The pid of the preprocess in the GPU pod of process group ``pgid``."""
    for pid in group_pids(pgid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[1:3] == [b"-m", b"preprocess"]:
            return pid
    raise AssertionError(f"no preprocess in process group {pgid}")


async def test_kill_9_of_a_pods_preprocess_frees_its_ring(scaling_stack: StackConfig) -> None:
    """The shared-memory ring a kill -9 leaves (its owner gone, its Triton stopped with the
    pod) is unlinked by the next `make scale`, and the new pod has a ring of its own."""
    config = scaling_stack
    table = ProcessTable(Path(config.run_dir))
    await scale(config, 2)
    port, pgid = triton_port(config, 1), table.pid("triton-1")
    assert pgid is not None
    async with load(
        public(config), concurrency=CONCURRENCY, timeout_s=30.0, images=images()
    ) as recorder:
        await served_by_all(config, {port})
        await flowing(recorder, 100)
        ring = ring_inodes(config, "triton-1")
        assert ring and all(p in shared_memory(group_pids(pgid)) for p in ring)  # mapped
        os.kill(pod_preprocess(pgid), signal.SIGKILL)

        async def stopped() -> bool:
            return not group_alive(pgid)

        await wait_for(stopped, WAIT_S, "the pod to stop with its preprocess")
        await envoy_admin.wait_gone(config.admin_url, TRITON, HOST, port, WAIT_S)
        await flowing(recorder, 100)  # the load goes on, on triton-0
    assert recorder.errors == 0, recorder.errors_by_code
    # The kill leaves the ring behind (not asserted: nobody maps it now, so any stack's sweep on
    # this machine, another test worker's, may free it first) until the next `make scale`,
    # which frees it and starts a new pod:
    out = await scale(config, 2)
    assert "triton-1 was not running" in out
    await envoy_has(config, {triton_port(config, i) for i in (0, 1)})
    now = ring_inodes(config, "triton-1")
    assert set(now) == set(ring) and not set(now.values()) & set(ring.values())  # all new


async def test_scale_in_another_shell_keeps_the_pool_one_model(scaling_stack: StackConfig) -> None:
    """The issue's case: a stack started with the simulated GPU, scaled from a shell that does
    not say so. The new replica serves the pool's model, not the default, and no request fails;
    a contradicting setting is refused, naming both."""
    config = scaling_stack
    command = ("scale", "--service", TRITON, "--replicas", "2")
    code, out = await stack_cli.another_shell(
        config, *command, INFERLINE_STACK_MODEL="efficientnet_lite0"
    )
    assert code == 2 and "it runs with 'simulated_gpu'" in out, out
    code, out = await stack_cli.another_shell(config, *command)
    assert code == 0, out
    ports = {triton_port(config, i) for i in (0, 1)}
    await envoy_has(config, ports)
    async with load(
        public(config), concurrency=CONCURRENCY, timeout_s=30.0, images=images()
    ) as recorder:
        await served_by_all(config, ports)
        await flowing(recorder, 200)
    assert recorder.errors == 0, recorder.errors_by_code  # no NOT_FOUND from a mixed pool


async def test_a_new_replica_is_scraped_without_a_restart(scaling_stack: StackConfig) -> None:
    tool("prometheus")  # skips where Prometheus is not installed (fails in CI)
    config = scaling_stack
    table = ProcessTable(Path(config.run_dir))
    started = table.pid(PROMETHEUS)
    url = config.prometheus_url
    await scale(config, 2)
    await series(url, 'up{job="triton", replica="triton-1"} == 1', WAIT_S)
    await series(url, 'nv_inference_request_success{replica="triton-1"}', WAIT_S)  # its own
    await scale(config, 1)

    async def gone() -> bool:
        return not await query(url, 'up{job="triton", replica="triton-1"}')

    await wait_for(gone, WAIT_S, "triton-1's target gone from Prometheus")
    assert table.pid(PROMETHEUS) == started  # the same Prometheus: no restart


def test_down_leaves_no_process_behind(scaling_stack: StackConfig) -> None:
    table = ProcessTable(Path(scaling_stack.run_dir))
    expected = {EDS, ENVOY} | {replica_name(s, 0) for s in scaling_stack.services}
    if binary() is not None:
        expected.add(PROMETHEUS)
    assert set(table.names()) == expected
    groups = [pid for name in table.names() if (pid := table.pid(name)) is not None]
    assert len(groups) == len(expected)
    segments, workspaces = triton_leftovers(scaling_stack, table)
    assert segments and all(w.is_dir() for w in workspaces)  # PyTriton's, under the run folder
    down(scaling_stack, table)
    assert [pgid for pgid in groups if group_alive(pgid)] == []
    assert table.names() == []
    assert [p for p in segments if p.exists()] == []  # nothing left in /dev/shm...
    assert not leftovers.workspaces(scaling_stack.run_dir).exists()  # ...nor on disk
