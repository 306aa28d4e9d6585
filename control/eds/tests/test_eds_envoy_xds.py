"""The xDS protocol against the real Envoy: NACKs, and delta vs state of the world vs plain EDS.

The control plane runs in the test's process here, so a test can put into the cache what no
source would (an address Envoy rejects) and read the server's metrics directly.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from prometheus_client import REGISTRY

from eds.cache import Endpoint, EndpointCache, Health
from eds.resources import SnapshotBuilder
from eds.server import XdsServer
from inferline_envoy import admin as envoy_admin
from inferline_envoy.binary import validate
from inferline_envoy.params import LOCAL
from inferline_envoy.render import render
from inferline_testing.harness import EnvoyProcess, envoy_params
from inferline_testing.ports import free_port
from inferline_testing.waits import wait_for

CLUSTERS = ["triton", "batcher"]
CLA = "ClusterLoadAssignment"
WAIT_S = 30.0  # generous: only bounds how long a broken run takes to fail


@dataclass
class InProcess:
    cache: EndpointCache
    xds: XdsServer
    port: int


@pytest.fixture
async def control_plane() -> AsyncIterator[InProcess]:
    cache = EndpointCache(CLUSTERS)
    xds = XdsServer(SnapshotBuilder(cache))
    server = grpc.aio.server()
    xds.register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield InProcess(cache, xds, port)
    xds.close()
    await server.stop(0)


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def triton_stats(envoy: EnvoyProcess) -> dict[str, int | str]:
    return await envoy_admin.stats(envoy.admin, r"^cluster\.triton\.(update_|version_text)")


async def health_checks(envoy: EnvoyProcess) -> int:
    """Health checks Envoy has made of the triton cluster's endpoints (one a second each)."""
    name = "cluster.triton.health_check.attempt"
    return int((await envoy_admin.stats(envoy.admin, rf"^{name}$")).get(name, 0))


async def names(envoy: EnvoyProcess, cluster: str = "triton") -> list[str]:
    return sorted(h.hostname for h in (await envoy_admin.clusters(envoy.admin))[cluster])


@pytest.mark.parametrize("xds_api", ["GRPC", "DELTA_GRPC"])
async def test_a_rejected_update_leaves_envoy_on_its_last_good_version(
    control_plane: InProcess, tmp_path: Path, xds_api: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache = control_plane.cache
    good = Endpoint("127.0.0.1", free_port(), name="good")
    cache.set_cluster("triton", [good])
    cache.mark_ready()
    envoy = EnvoyProcess(tmp_path, envoy_params(control_plane.port, CLUSTERS, xds_api))
    await envoy.start_ready()
    try:

        async def accepted() -> dict[str, int | str]:
            stats = await triton_stats(envoy)
            return stats if stats.get("cluster.triton.update_success") else {}

        before = await wait_for(accepted, WAIT_S, "the first version accepted")
        assert await names(envoy) == ["good"]
        nacks = metric("inferline_eds_nacks_total", type=CLA)
        pushes = metric("inferline_eds_pushes_total", type=CLA, reason="change")
        with caplog.at_level(logging.WARNING, logger="eds.server"):
            # What no source writes (the file source checks addresses) but a buggy one might.
            cache.set_cluster("triton", [Endpoint("triton-9.invalid", 8001, name="bad")])

            async def rejected() -> bool:
                return (await triton_stats(envoy)).get("cluster.triton.update_rejected") == 1

            await wait_for(rejected, WAIT_S, "the bad version rejected")
            # A resend loop would answer each NACK at once; let Envoy's health checker prove
            # that time has passed (two more checks of `good`, a second apart) while the
            # counts below stay where they are.
            checks = await health_checks(envoy)

            async def two_more_checks() -> bool:
                return await health_checks(envoy) >= checks + 2

            await wait_for(two_more_checks, WAIT_S, "two more health checks")
        after = await triton_stats(envoy)
        assert after["cluster.triton.update_rejected"] == 1
        assert after["cluster.triton.version_text"] == before["cluster.triton.version_text"]
        assert await names(envoy) == ["good"]
        assert metric("inferline_eds_nacks_total", type=CLA) == nacks + 1
        assert metric("inferline_eds_pushes_total", type=CLA, reason="change") == pushes + 1
        assert "rejected ClusterLoadAssignment" in caplog.text
        assert "triton-9.invalid" in caplog.text  # Envoy's own error detail
        cache.set_cluster("triton", [good, Endpoint("127.0.0.1", free_port(), name="next")])

        async def moved_on() -> bool:
            return await names(envoy) == ["good", "next"]

        await wait_for(moved_on, WAIT_S, "on the next good version")
        latest = await triton_stats(envoy)
        assert latest["cluster.triton.version_text"] != before["cluster.triton.version_text"]
    finally:
        await envoy.stop()


def plain_eds(config: dict[str, Any], api_type: str) -> dict[str, Any]:
    """The rendered config with each cluster on the plain EDS service instead of ADS."""
    config = copy.deepcopy(config)
    source = {
        "api_config_source": {
            "api_type": api_type,
            "transport_api_version": "V3",
            "grpc_services": [{"envoy_grpc": {"cluster_name": "xds"}}],
        },
        "resource_api_version": "V3",
    }
    for cluster in config["static_resources"]["clusters"]:
        if cluster["type"] == "EDS":
            cluster["eds_cluster_config"]["eds_config"] = source
    del config["dynamic_resources"]
    return config


View = dict[str, set[tuple[str, int, str, int, str, str]]]


async def view(envoy: EnvoyProcess) -> View:
    by_cluster = await envoy_admin.clusters(envoy.admin)
    return {
        c: {(h.address, h.port, h.eds_health, h.weight, h.zone, h.hostname) for h in by_cluster[c]}
        for c in CLUSTERS
    }


def expected(cache: EndpointCache) -> View:
    out: View = {}
    for c in CLUSTERS:
        state = cache.get(c)
        assert state is not None
        out[c] = {
            (e.address, e.port, str(e.health), e.weight, e.zone, e.name) for e in state.endpoints
        }
    return out


async def test_delta_sotw_and_plain_eds_give_envoy_the_same_endpoints(
    control_plane: InProcess, tmp_path: Path
) -> None:
    cache = control_plane.cache
    ports = [free_port() for _ in range(5)]  # nothing listens: only the configuration matters
    cache.update(
        {
            "triton": [
                Endpoint("127.0.0.1", ports[0], Health.HEALTHY, 2, "zone-a", "t0"),
                Endpoint("127.0.0.1", ports[1], Health.DRAINING, 1, "zone-b", "t1"),
                Endpoint("127.0.0.1", ports[2], Health.UNHEALTHY, 3, "zone-a", "t2"),
            ],
            "batcher": [Endpoint("127.0.0.1", ports[3], name="b0")],
        }
    )
    cache.mark_ready()
    envoys = []
    for api in ("GRPC", "DELTA_GRPC"):
        envoys.append(
            EnvoyProcess(tmp_path, envoy_params(control_plane.port, CLUSTERS, api), f"ads-{api}")
        )
        params = envoy_params(control_plane.port, CLUSTERS, api)
        config = plain_eds(render(params), api)
        envoys.append(EnvoyProcess(tmp_path, params, f"eds-{api}", config))
    try:
        await asyncio.gather(*(e.start_ready() for e in envoys))

        async def agree() -> bool:
            views = await asyncio.gather(*(view(e) for e in envoys))
            return all(v == expected(cache) for v in views)

        await wait_for(agree, WAIT_S, "the same endpoints everywhere")
        cache.update(
            {
                "triton": [
                    Endpoint("127.0.0.1", ports[0], Health.DRAINING, 2, "zone-a", "t0"),
                    Endpoint("127.0.0.1", ports[2], Health.HEALTHY, 5, "zone-a", "t2"),
                    Endpoint("127.0.0.1", ports[4], Health.HEALTHY, 1, "zone-c", "t3"),
                ],
                "batcher": [],
            }
        )
        await wait_for(agree, WAIT_S, "the same endpoints after a change")
        assert control_plane.xds.streams == 6  # one ADS stream each; plain EDS: one per cluster
    finally:
        await asyncio.gather(*(e.stop() for e in envoys))


def test_the_rendered_plain_eds_variant_is_valid() -> None:
    params = dataclasses.replace(LOCAL, xds_api="DELTA_GRPC")
    ok, output = validate(plain_eds(render(params), "DELTA_GRPC"))
    assert ok, output
