"""The Kubernetes profile's probe listener and the preStop drain, on the real Envoy.

The probe listener exposes the admin API's /ready and /stats/prometheus and nothing else (the
admin itself stays on loopback); the drain takes Envoy out of service while the requests in
flight finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from eds.sources import endpoints_file
from inferline_envoy import admin
from inferline_testing.harness import EdsProcess, EnvoyProcess, Pool, envoy_params, flowing, load
from inferline_testing.ports import free_port
from inferline_testing.waits import wait_for

pytestmark = pytest.mark.e2e
DELAY_MS = 300.0  # each request's time at the backend: long enough to be caught in flight


@pytest.fixture
async def envoy(tmp_path: Path) -> AsyncIterator[tuple[EnvoyProcess, Pool, int]]:
    """Envoy with a probe listener, its control plane, and one probe backend behind it."""
    endpoints = tmp_path / "endpoints.yaml"
    endpoints_file.write(endpoints, {"triton": []})
    eds = EdsProcess(tmp_path, endpoints, ["triton"])
    await eds.start_ready()
    probe_port = free_port()
    proxy = EnvoyProcess(tmp_path, envoy_params(eds.port, ["triton"], probe_port=probe_port))
    pool = Pool("triton", tmp_path, endpoints, proxy.admin, delay_ms=DELAY_MS)
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
    async with (
        load(proxy.listener("triton"), concurrency=4, timeout_s=30.0) as recorder,
        grpc.aio.insecure_channel(proxy.listener("triton")) as channel,
    ):
        await flowing(recorder, 8)
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        calls = [
            asyncio.ensure_future(
                stub.ModelInfer(
                    service_pb2.ModelInferRequest(model_name="m", id=f"{i}"), timeout=30
                )
            )
            for i in range(4)
        ]

        async def all_in_flight() -> bool:  # the load's 4 and these 4, DELAY_MS each
            return await admin.in_flight(proxy.admin) >= 8

        await wait_for(all_in_flight, 30.0, "8 requests in flight")
        left = await admin.drain(proxy.admin, settle_s=0.0, timeout_s=30.0)
        replies = await asyncio.gather(*calls)  # each answered: none cut off by the drain
        served = recorder.requests
    assert left == 0
    assert [reply.id for reply in replies] == ["0", "1", "2", "3"]
    assert await status(f"http://127.0.0.1:{port}/ready") == 503  # out of service
    assert served > 8
    # The load's requests in flight finished too; the ones it sent after the drain began found
    # Envoy closing, and nothing failed in any other way.
    assert set(recorder.errors_by_code) <= {"UNAVAILABLE"}, recorder.errors_by_code
    assert proxy.running  # draining is not stopping: the kubelet's SIGTERM follows


def test_the_drain_cli_says_when_envoy_is_not_there(capsys: pytest.CaptureFixture[str]) -> None:
    assert admin.main(["--admin", f"http://127.0.0.1:{free_port()}", "--drain"]) == 3
    assert "is not answering" in capsys.readouterr().err


async def test_in_flight_counts_the_hops_only(envoy: tuple[EnvoyProcess, Pool, int]) -> None:
    proxy, _, _ = envoy
    assert await admin.in_flight(proxy.admin) == 0  # the admin call asking is not counted
