"""Proxyless gRPC: a real grpcio client (tritonclient) dials xds:///triton with no Envoy."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from eds.cache import Health
from eds.sources import endpoints_file
from inferline_envoy import proxyless
from inferline_testing.harness import EdsProcess, Pool
from inferline_testing.waits import wait_for

CLIENT = Path(__file__).with_name("eds_proxyless_client.py")
WAIT_S = 30.0  # generous: only bounds how long a broken run takes to fail


@pytest.fixture
async def pool(tmp_path: Path) -> AsyncIterator[tuple[EdsProcess, Pool]]:
    endpoints = tmp_path / "endpoints.yaml"
    endpoints_file.write(endpoints, {"triton": []})
    eds = EdsProcess(tmp_path, endpoints, ["triton", "batcher"])
    await eds.start_ready()
    pool = Pool("triton", tmp_path, endpoints, admin="")
    try:
        await pool.add()
        await pool.add()
        yield eds, pool
    finally:
        await pool.close()
        await eds.stop()


async def served_by(
    eds: EdsProcess, requests: int, mode: str = "sync", backends: int = 0
) -> dict[str, int]:
    """A fresh client's ``requests`` calls by backend, counted once ``backends`` answered."""
    env = {
        **os.environ,
        proxyless.BOOTSTRAP_CONFIG_ENV: json.dumps(proxyless.bootstrap(eds.address, "test-grpc")),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(CLIENT), "xds:///triton", str(requests), mode, str(backends),
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-2000:]
    result: dict[str, int] = json.loads(out.decode().strip().splitlines()[-1])
    return result


async def eds_metrics(eds: EdsProcess) -> str:
    url = f"http://127.0.0.1:{eds.metrics_port}/metrics"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        return await response.text()


async def test_a_grpc_client_balances_over_the_replicas_itself(
    pool: tuple[EdsProcess, Pool],
) -> None:
    eds, _ = pool
    served = await served_by(eds, 40, backends=2)  # counted once both are connected
    assert set(served) == {"triton-0", "triton-1"}, served
    assert sum(served.values()) == 40
    assert min(served.values()) >= 10, served  # round robin, per request
    log = eds.log.read_text()
    for kind in ("Listener", "RouteConfiguration", "Cluster", "ClusterLoadAssignment"):
        assert f"test-grpc (sotw) subscribed to {kind} triton" in log


async def test_a_draining_replica_gets_no_new_calls(pool: tuple[EdsProcess, Pool]) -> None:
    """With a bare grpc.aio channel, as the batcher's upstream would dial xds:///triton."""
    eds, replicas = pool
    assert set(await served_by(eds, 20, "aio", backends=2)) == {"triton-0", "triton-1"}
    endpoints_file.set_health(
        replicas.endpoints, "triton", "127.0.0.1", replicas.replicas[0].port, Health.DRAINING
    )
    draining = 'inferline_eds_endpoints{cluster="triton",health="DRAINING"} 1.0'

    async def control_plane_has_it() -> bool:
        return draining in await eds_metrics(eds)

    await wait_for(control_plane_has_it, WAIT_S, "the control plane to read the change")
    assert await served_by(eds, 20, "aio") == {"triton-1": 20}


def test_the_bootstrap_cli(tmp_path: Path) -> None:
    out = tmp_path / "bootstrap.json"
    assert proxyless.main(["--xds-address", "10.0.0.1:18000", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["xds_servers"][0]["server_uri"] == "10.0.0.1:18000"
    assert data["node"]["id"] == "inferline-grpc"
