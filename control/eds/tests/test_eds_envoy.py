"""The control plane with the real Envoy and real gRPC backends, under load from the demo client.

Every test starts its own processes on free ports: the control plane (``python -m eds``,
file source), Envoy (rendered from the template), and fake backends
(``python -m inferline_testing.fake_backend``, KServe v2 servers that report which replica served a
request and when its first one came).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin
from inferline_testing.harness import (
    EdsProcess,
    EnvoyProcess,
    Pool,
    ScaleUp,
    envoy_params,
    flowing,
    load,
)
from inferline_testing.waits import wait_for

# Generous: only bounds how long a broken run takes to fail. How fast Envoy converges or ejects
# a dead backend is measured by `make bench-eds`, and printed here (pytest -s), not asserted.
WAIT_S = 30.0
CONNECTED = "control_plane.connected_state"


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
        await envoy_admin.wait_routable(envoy.admin, "triton", "127.0.0.1", first.port, WAIT_S)
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


async def hostnames(plane: Plane) -> list[str]:
    return [h.hostname for h in (await envoy_admin.clusters(plane.envoy.admin))["triton"]]


async def test_scale_1_2_4_2_1_under_load_with_no_failed_request(plane: Plane) -> None:
    pool, ups = plane.pool, list[ScaleUp]()
    async with load(plane.target, concurrency=8) as recorder:
        await flowing(recorder)
        for replicas in (2, 4, 2, 1):
            while len(pool.replicas) < replicas:
                replica, event = await pool.add()
                await pool.first_request(replica, event, WAIT_S)  # Envoy sends it requests
                ups.append(event)
            while len(pool.replicas) > replicas:
                await pool.remove()
            await flowing(recorder)

        async def only_the_first() -> bool:  # the drained ones are gone from Envoy too
            return await hostnames(plane) == ["triton-0"]

        await wait_for(only_the_first, WAIT_S, "Envoy left with triton-0 alone")
    metrics = await eds_metrics(plane.eds)
    summary = recorder.summary()
    convergence = {e.replica: round(e.convergence_s or -1, 3) for e in ups}
    print(f"announced -> first request (s): {convergence}; {summary}")
    assert summary.errors == 0, recorder.errors_by_code
    assert 'inferline_eds_connected_proxies{api="sotw"} 1.0' in metrics
    assert 'inferline_eds_endpoints{cluster="triton",health="HEALTHY"} 1.0' in metrics
    assert 'inferline_eds_endpoints{cluster="triton",health="DRAINING"} 0.0' in metrics
    assert 'inferline_eds_cluster_version_info{cluster="triton",version="' in metrics
    assert 'inferline_eds_acks_total{type="ClusterLoadAssignment"}' in metrics
    assert 'inferline_eds_push_duration_seconds_count{type="ClusterLoadAssignment"}' in metrics
    assert 'inferline_eds_nacks_total{type="ClusterLoadAssignment"} 0.0' in metrics  # none


async def test_kill_9_a_backend_under_load(plane: Plane) -> None:
    pool = plane.pool
    async with load(plane.target, concurrency=8) as recorder:
        victim, event = await pool.add()
        await pool.first_request(victim, event, WAIT_S)
        await flowing(recorder)
        killed = time.monotonic()
        await victim.kill()
        pool.replicas.remove(victim)  # already dead: the fixture has nothing to stop
        admin, port = plane.envoy.admin, victim.port
        await envoy_admin.wait_gone(admin, "triton", "127.0.0.1", port, WAIT_S)
        left_after_s = time.monotonic() - killed  # outlier detection, on failed connections
        await envoy_admin.wait_host(
            admin, "triton", "127.0.0.1", port,
            lambda h: h is not None and "failed_active_health_check" in h.flags,
            WAIT_S, "failing its health checks",
        )  # fmt: skip
        failed_hc_after_s = time.monotonic() - killed  # and the health checks keep it out
        await flowing(recorder, 200)
    print(
        f"out of rotation after {left_after_s:.2f} s, failed its health checks after "
        f"{failed_hc_after_s:.2f} s; {recorder.summary()}"
    )
    assert recorder.errors == 0, recorder.errors_by_code  # retried on the other backend


async def connected_state(plane: Plane) -> int | str | None:
    return (await envoy_admin.stats(plane.envoy.admin, CONNECTED)).get(CONNECTED)


async def test_control_plane_restart_under_load(plane: Plane) -> None:
    async with load(plane.target, concurrency=8) as recorder:
        await flowing(recorder)
        assert await connected_state(plane) == 1
        await plane.eds.kill()

        async def disconnected() -> bool:  # Envoy notices the stream is gone
            return await connected_state(plane) == 0

        await wait_for(disconnected, WAIT_S, "Envoy to see the control plane gone")
        await flowing(recorder, 300)  # Envoy serves on its last configuration
        replica, event = await plane.pool.add()  # the stack scales while the control plane is down
        # 300 more requests through Envoy while the new replica is up and announced in the
        # file: with nobody to tell Envoy, none of them reaches it.
        await flowing(recorder, 300)
        assert (await replica.stats())[0] == 0
        await plane.eds.start_ready()
        await plane.pool.first_request(replica, event, WAIT_S)  # resynchronised
        await flowing(recorder)
    assert await connected_state(plane) == 1
    assert recorder.errors == 0, recorder.errors_by_code
