"""The Kubernetes profile's probe listener and the preStop drain, on the real Envoy.

The probe listener exposes the admin API's /ready and /stats/prometheus and nothing else (the
admin itself stays on loopback); the drain takes Envoy out of service while the requests in
flight finish.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from eds.sources import endpoints_file
from inferline_envoy import admin
from inferline_testing.harness import EdsProcess, EnvoyProcess, Pool, envoy_params, flowing, load
from inferline_testing.ports import free_port

pytestmark = pytest.mark.e2e


@pytest.fixture
async def envoy(tmp_path: Path) -> AsyncIterator[tuple[EnvoyProcess, Pool, int]]:
    """Envoy with a probe listener, its control plane, and one probe backend behind it."""
    endpoints = tmp_path / "endpoints.yaml"
    endpoints_file.write(endpoints, {"triton": []})
    eds = EdsProcess(tmp_path, endpoints, ["triton"])
    await eds.start_ready()
    probe_port = free_port()
    proxy = EnvoyProcess(tmp_path, envoy_params(eds.port, ["triton"], probe_port=probe_port))
    pool = Pool("triton", tmp_path, endpoints, proxy.admin, delay_ms=20.0)
    try:
        await proxy.start_ready()
        backend, _ = await pool.add()
        await admin.wait_routable(proxy.admin, "triton", "127.0.0.1", backend.port, 30.0)
        yield proxy, pool, probe_port
    finally:
        await pool.close()
        await proxy.stop()
        await eds.stop()


async def status(url: str, method: str = "GET") -> int:
    async with aiohttp.ClientSession() as session, session.request(method, url) as response:
        return response.status


async def test_the_probe_listener_exposes_readiness_and_stats_only(
    envoy: tuple[EnvoyProcess, Pool, int],
) -> None:
    _, _, port = envoy
    base = f"http://127.0.0.1:{port}"
    assert await status(f"{base}/ready") == 200
    assert await status(f"{base}/stats/prometheus") == 200
    for path in ("/clusters", "/config_dump", "/healthcheck/fail", "/quitquitquit"):
        assert await status(f"{base}{path}") == 404, path
        assert await status(f"{base}{path}", "POST") == 404, path  # the admin's writes
    assert await status(f"{base}/ready", "POST") == 404


async def test_drain_fails_readiness_and_lets_the_requests_in_flight_finish(
    envoy: tuple[EnvoyProcess, Pool, int],
) -> None:
    proxy, _, port = envoy
    async with load(proxy.listener("triton"), concurrency=4, timeout_s=30.0) as recorder:
        await flowing(recorder, 20)
        assert await admin.in_flight(proxy.admin) > 0  # 20 ms a request, 4 at a time
        left = await admin.drain(proxy.admin, settle_s=0.0, timeout_s=30.0)
        served = recorder.requests
    assert left == 0
    assert await status(f"http://127.0.0.1:{port}/ready") == 503  # out of service
    assert served > 20
    # What was in flight when the drain began finished; new requests found Envoy closing.
    assert set(recorder.errors_by_code) <= {"UNAVAILABLE"}, recorder.errors_by_code
    assert proxy.running  # draining is not stopping: the kubelet's SIGTERM follows


def test_the_drain_cli_says_when_envoy_is_not_there(capsys: pytest.CaptureFixture[str]) -> None:
    assert admin.main(["--admin", f"http://127.0.0.1:{free_port()}", "--drain"]) == 3
    assert "is not answering" in capsys.readouterr().err


async def test_in_flight_counts_the_hops_only(envoy: tuple[EnvoyProcess, Pool, int]) -> None:
    proxy, _, _ = envoy
    assert await admin.in_flight(proxy.admin) == 0  # the admin call asking is not counted
