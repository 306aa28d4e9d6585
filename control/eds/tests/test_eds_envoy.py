"""The control plane with the real Envoy and real gRPC backends, under load from the demo client.

Every test starts its own processes on free ports: the control plane (``python -m eds``,
file source), Envoy (rendered from the template), and probe backends
(``python -m inferline_testing.probe``, KServe v2 servers that report which replica served a
request and when its first one came).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from demo_client.stats import Recorder
from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin
from inferline_envoy import config as envoy_config
from inferline_testing.harness import EdsProcess, EnvoyProcess, Pool, ScaleUp, envoy_params, load

CONVERGENCE_GOAL_S = 1.0
# The health-check window: a dead backend fails `unhealthy_threshold` checks `interval` apart,
# each taking at most `timeout`.
HC_WINDOW_S = (
    envoy_config.LOCAL.health_check_interval_s * envoy_config.LOCAL.unhealthy_threshold
    + envoy_config.LOCAL.health_check_timeout_s
)


@dataclass
class Plane:
    eds: EdsProcess
    envoy: EnvoyProcess
    pool: Pool

    @property
    def target(self) -> str:
        return self.envoy.listener("triton")

    def logs(self) -> str:
        procs = [self.eds, self.envoy, *self.pool.replicas]
        return "\n".join(f"--- {p.name}\n{p.tail(15)}" for p in procs)


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[Plane]:
    endpoints = tmp_path / "endpoints.yaml"
    endpoints_file.write(endpoints, {"triton": []})
    eds = EdsProcess(tmp_path, endpoints, ["triton"])
    await eds.start_ready()
    envoy = EnvoyProcess(tmp_path, envoy_params(eds.port, ["triton"]))
    pool = Pool("triton", tmp_path, endpoints, envoy.admin)
    plane = Plane(eds, envoy, pool)
    try:
        first, _ = await pool.add()
        await envoy.start_ready()
        await envoy_admin.wait_routable(envoy.admin, "triton", "127.0.0.1", first.port)
        yield plane
    finally:
        print(plane.logs())  # shown when a test fails
        await pool.close()
        await envoy.stop()
        await eds.stop()


async def eds_metrics(eds: EdsProcess) -> str:
    url = f"http://127.0.0.1:{eds.metrics_port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return await response.text()


async def flowing(recorder: Recorder, requests: int = 50, timeout_s: float = 10.0) -> None:
    """Wait until ``requests`` more requests have finished."""
    target = recorder.requests + requests
    deadline = time.monotonic() + timeout_s
    while recorder.requests < target:
        assert time.monotonic() < deadline, f"load stalled at {recorder.requests} requests"
        await asyncio.sleep(0.02)


async def test_scale_1_2_4_2_1_under_load_with_no_failed_request(plane: Plane) -> None:
    pool, ups = plane.pool, list[ScaleUp]()
    async with load(plane.target, concurrency=8) as recorder:
        await flowing(recorder)
        for replicas in (2, 4, 2, 1):
            while len(pool.replicas) < replicas:
                probe, event = await pool.add()
                await pool.first_request(probe, event)
                ups.append(event)
            while len(pool.replicas) > replicas:
                await pool.remove()
            await flowing(recorder)
        for _ in range(100):  # the last removal reaches Envoy within a poll or two
            hosts = (await envoy_admin.clusters(plane.envoy.admin))["triton"]
            if len(hosts) == 1:
                break
            await asyncio.sleep(0.02)
    metrics = await eds_metrics(plane.eds)
    summary = recorder.summary()
    convergence = {e.replica: round(e.convergence_s or -1, 3) for e in ups}
    print(f"convergence (s): {convergence}; {summary}")
    assert summary.errors == 0, recorder.errors_by_code
    assert len(ups) == 3
    assert all(0 <= (e.convergence_s or -1) <= CONVERGENCE_GOAL_S for e in ups), convergence
    assert [h.hostname for h in hosts] == ["triton-0"]  # drained ones are gone from Envoy too
    assert summary.requests > 500
    assert 'inferline_eds_connected_proxies{api="sotw"} 1.0' in metrics
    assert 'inferline_eds_endpoints{cluster="triton",health="HEALTHY"} 1.0' in metrics
    assert 'inferline_eds_endpoints{cluster="triton",health="DRAINING"} 0.0' in metrics
    assert 'inferline_eds_cluster_version_info{cluster="triton",version="' in metrics
    assert 'inferline_eds_acks_total{type="ClusterLoadAssignment"}' in metrics
    assert 'inferline_eds_push_duration_seconds_count{type="ClusterLoadAssignment"}' in metrics
    assert 'inferline_eds_nacks_total{type="ClusterLoadAssignment"}' not in metrics  # none


async def test_kill_9_a_backend_under_load(plane: Plane) -> None:
    pool = plane.pool
    async with load(plane.target, concurrency=8) as recorder:
        victim, event = await pool.add()
        await pool.first_request(victim, event)
        await flowing(recorder)
        killed = time.monotonic()
        await victim.kill()
        admin, port = plane.envoy.admin, victim.port
        await envoy_admin.wait_gone(admin, "triton", "127.0.0.1", port, HC_WINDOW_S + 1)
        left_after_s = time.monotonic() - killed  # outlier detection, on failed connections
        await envoy_admin.wait_host(
            admin, "triton", "127.0.0.1", port,
            lambda h: h is not None and "failed_active_health_check" in h.flags,
            HC_WINDOW_S + 1, "failing its health checks",
        )  # fmt: skip
        failed_hc_after_s = time.monotonic() - killed  # and the health checks keep it out
        await flowing(recorder, 200)
    print(
        f"out of rotation after {left_after_s:.2f} s, failed its health checks after "
        f"{failed_hc_after_s:.2f} s; {recorder.summary()}"
    )
    assert recorder.errors == 0, recorder.errors_by_code  # retried on the other backend
    assert left_after_s <= HC_WINDOW_S
    assert failed_hc_after_s <= HC_WINDOW_S + 0.5
    pool.replicas.remove(victim)  # already dead: the fixture has nothing to stop


async def test_control_plane_restart_under_load(plane: Plane) -> None:
    admin = plane.envoy.admin
    async with load(plane.target, concurrency=8) as recorder:
        await flowing(recorder)
        await plane.eds.kill()
        connected = "control_plane.connected_state"
        for _ in range(100):  # Envoy notices the stream is gone
            if (await envoy_admin.stats(admin, connected)).get(connected) == 0:
                break
            await asyncio.sleep(0.05)
        await flowing(recorder, 300)  # Envoy serves on its last configuration
        probe, event = await plane.pool.add()  # the stack scales while the control plane is down
        await asyncio.sleep(0.3)
        assert (await probe.stats())[0] == 0  # nobody to tell Envoy yet
        await plane.eds.start_ready()
        await plane.pool.first_request(probe, event)  # resynchronised
        await flowing(recorder)
    assert (await envoy_admin.stats(admin, connected))[connected] == 1
    assert recorder.errors == 0, recorder.errors_by_code
