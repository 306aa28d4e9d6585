"""The xDS transport over real gRPC: ADS (SotW and delta), plain EDS/CDS, metrics, shutdown."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from envoy_data_plane.envoy.config.core.v3 import Node
from envoy_data_plane.envoy.config.endpoint.v3 import ClusterLoadAssignment
from envoy_data_plane.envoy.service.discovery.v3 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from prometheus_client import REGISTRY

from eds.cache import Endpoint, EndpointCache
from eds.resources import CLUSTERS, ENDPOINTS, SnapshotBuilder
from eds.server import XdsServer
from eds.streams import Kind, StreamEvent
from inferline import tracing
from inferline_testing.waits import wait_for_state

from .xds_requests import eds_request

WAIT_S = 30.0  # generous: only bounds how long a broken run takes to fail
ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/"
EDS = "/envoy.service.endpoint.v3.EndpointDiscoveryService/"
CDS = "/envoy.service.cluster.v3.ClusterDiscoveryService/"
E1, E2 = Endpoint("10.0.0.1", 8001), Endpoint("10.0.0.2", 8001)


class Stream:
    """A bidirectional call whose responses a background task collects (cancelling a pending
    ``call.read()`` would cancel the whole RPC)."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.responses: asyncio.Queue[Any] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        while True:
            response = await self.call.read()
            await self.responses.put(response)
            if response is grpc.aio.EOF:
                return

    async def write(self, message: Any) -> None:
        await self.call.write(message)

    async def read(self, wait_s: float = WAIT_S) -> Any:
        return await asyncio.wait_for(self.responses.get(), wait_s)

    async def code(self) -> grpc.StatusCode:
        return await self.call.code()

    def cancel(self) -> None:
        self._reader.cancel()
        self.call.cancel()


class World:
    def __init__(self, cache: EndpointCache, xds: XdsServer, channel: grpc.aio.Channel) -> None:
        self.cache, self.xds, self.channel = cache, xds, channel
        self.events: list[StreamEvent] = []
        xds.add_observer(self.events.append)

    async def seen(self, kind: Kind, count: int = 1) -> None:
        """Wait until the server has handled ``count`` requests of ``kind``."""

        def enough() -> bool:
            return sum(1 for e in self.events if e.kind is kind) >= count

        await wait_for_state(enough, WAIT_S, f"{count} {kind} (seen: {self.events})")

    def sotw(self, path: str = ADS + "StreamAggregatedResources") -> Stream:
        return Stream(
            self.channel.stream_stream(
                path, request_serializer=bytes, response_deserializer=DiscoveryResponse.parse
            )()
        )

    def delta(self, path: str = ADS + "DeltaAggregatedResources") -> Stream:
        return Stream(
            self.channel.stream_stream(
                path, request_serializer=bytes, response_deserializer=DeltaDiscoveryResponse.parse
            )()
        )


@pytest.fixture
async def world() -> AsyncIterator[World]:
    cache = EndpointCache(["triton", "batcher"])
    xds = XdsServer(SnapshotBuilder(cache))
    server = grpc.aio.server()
    xds.register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield World(cache, xds, channel)
    xds.close()
    await channel.close()
    await server.stop(0)


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def request(*names: str, version: str = "", nonce: str = "", error: str = "") -> DiscoveryRequest:
    return eds_request(*names, version=version, nonce=nonce, error=error, node="test-proxy")


def endpoints_of(response: DiscoveryResponse) -> list[tuple[str, int]]:
    """(address, port) of every endpoint of the one ClusterLoadAssignment in ``response``."""
    [resource] = response.resources
    cla = ClusterLoadAssignment.parse(resource.value)
    out = []
    for locality in cla.endpoints:
        for lb in locality.lb_endpoints:
            assert lb.endpoint is not None and lb.endpoint.address is not None
            socket = lb.endpoint.address.socket_address
            assert socket is not None and socket.port_value is not None
            out.append((socket.address, socket.port_value))
    return out


async def test_sotw_holds_its_answer_until_the_cache_is_ready(world: World) -> None:
    call = world.sotw()
    await call.write(request("triton"))
    await world.seen(Kind.SUBSCRIBE)  # handled, and nothing to answer yet
    world.cache.set_cluster("triton", [E1])  # changed, but still not ready
    world.cache.set_cluster("triton", [E1, E2])
    world.cache.mark_ready()
    # A stream delivers in order: had anything gone out before the cache was ready, it would
    # be read here first instead of the ready content.
    first = await call.read()
    assert endpoints_of(first) == [(E1.address, E1.port), (E2.address, E2.port)]
    await call.write(request("triton", version=first.version_info, nonce=first.nonce))
    await world.seen(Kind.ACK)
    world.cache.set_cluster("triton", [E2])
    second = await call.read()  # the next one is the next change: nothing came in between
    assert endpoints_of(second) == [(E2.address, E2.port)]
    assert second.version_info != first.version_info
    call.cancel()


async def test_sotw_ack_push_nack_over_grpc(world: World, caplog: pytest.LogCaptureFixture) -> None:
    world.cache.mark_ready()
    acks = metric("inferline_eds_acks_total", type="ClusterLoadAssignment")
    nacks = metric("inferline_eds_nacks_total", type="ClusterLoadAssignment")
    pushes = metric("inferline_eds_pushes_total", type="ClusterLoadAssignment", reason="change")
    call = world.sotw()
    await call.write(request("triton"))
    first = await call.read()
    await call.write(request("triton", version=first.version_info, nonce=first.nonce))
    await world.seen(Kind.ACK)
    world.cache.set_cluster("triton", [E1, E2])
    second = await call.read()
    assert second.version_info != first.version_info
    with caplog.at_level(logging.WARNING, logger="eds.server"):
        await call.write(
            request("triton", version=first.version_info, nonce=second.nonce, error="bad IP")
        )
        await world.seen(Kind.NACK)
    assert "test-proxy (sotw) rejected ClusterLoadAssignment" in caplog.text
    assert "bad IP" in caplog.text
    kinds = [e.kind for e in world.events]
    assert kinds == [Kind.SUBSCRIBE, Kind.ACK, Kind.NACK]
    assert metric("inferline_eds_acks_total", type="ClusterLoadAssignment") == acks + 1
    assert metric("inferline_eds_nacks_total", type="ClusterLoadAssignment") == nacks + 1
    assert (
        metric("inferline_eds_pushes_total", type="ClusterLoadAssignment", reason="change")
        == pushes + 1
    )
    world.cache.set_cluster("triton", [E2])
    # In order on the stream: a resend of the NACKed version would be read here instead.
    third = await call.read()
    assert third.version_info not in (first.version_info, second.version_info)
    assert endpoints_of(third) == [(E2.address, E2.port)]
    call.cancel()


async def test_delta_over_grpc(world: World) -> None:
    world.cache.mark_ready()
    call = world.delta()
    await call.write(
        DeltaDiscoveryRequest(
            node=Node(id="delta-proxy"),
            type_url=ENDPOINTS,
            resource_names_subscribe=["triton", "batcher"],
        )
    )
    first = await call.read()
    assert sorted(r.name for r in first.resources) == ["batcher", "triton"]
    await call.write(DeltaDiscoveryRequest(type_url=ENDPOINTS, response_nonce=first.nonce))
    await world.seen(Kind.ACK)
    world.cache.set_cluster("batcher", [E2])
    second = await call.read()
    assert [r.name for r in second.resources] == ["batcher"]
    assert world.events[-1].kind is Kind.ACK and world.events[-1].node_id == "delta-proxy"
    call.cancel()


async def test_plain_eds_stream_and_fetch(world: World) -> None:
    fetch = world.channel.unary_unary(
        EDS + "FetchEndpoints",
        request_serializer=bytes,
        response_deserializer=DiscoveryResponse.parse,
    )
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await fetch(request("triton"))
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE
    world.cache.set_cluster("triton", [E1])
    world.cache.mark_ready()
    fetched = await fetch(DiscoveryRequest(resource_names=["triton"]))
    assert fetched.type_url == ENDPOINTS and len(fetched.resources) == 1
    call = world.sotw(EDS + "StreamEndpoints")
    await call.write(DiscoveryRequest(resource_names=["triton"]))  # no type URL: it is EDS
    streamed = await call.read()
    assert streamed.version_info == fetched.version_info
    call.cancel()
    delta = world.delta(EDS + "DeltaEndpoints")
    await delta.write(DeltaDiscoveryRequest(resource_names_subscribe=["batcher"]))
    assert [r.name for r in (await delta.read()).resources] == ["batcher"]
    delta.cancel()


async def test_plain_cds_fetch_lists_every_cluster(world: World) -> None:
    world.cache.mark_ready()
    fetch = world.channel.unary_unary(
        CDS + "FetchClusters",
        request_serializer=bytes,
        response_deserializer=DiscoveryResponse.parse,
    )
    response = await fetch(DiscoveryRequest(type_url=CLUSTERS))
    assert len(response.resources) == 2


async def test_connected_proxies_and_close_ends_every_stream(world: World) -> None:
    world.cache.mark_ready()
    before = metric("inferline_eds_connected_proxies", api="sotw")
    calls = [world.sotw() for _ in range(3)]
    for call in calls:
        await call.write(request("triton"))
        await call.read()
    assert world.xds.streams == 3
    assert metric("inferline_eds_connected_proxies", api="sotw") == before + 3
    world.xds.close()
    for call in calls:
        assert await call.read() is grpc.aio.EOF
        assert await call.code() == grpc.StatusCode.OK
    assert world.xds.streams == 0
    assert metric("inferline_eds_connected_proxies", api="sotw") == before


async def test_a_client_that_goes_away_is_forgotten(world: World) -> None:
    world.cache.mark_ready()
    before = metric("inferline_eds_connected_proxies", api="sotw")
    call = world.sotw()
    await call.write(request("triton"))
    await call.read()
    assert world.xds.streams == 1
    call.cancel()
    await wait_for_state(lambda: world.xds.streams == 0, WAIT_S, "the stream forgotten")
    assert metric("inferline_eds_connected_proxies", api="sotw") == before
    assert world.cache.set_cluster("triton", [E2])  # no stream left to wake: nothing breaks
    again = world.sotw()  # and the next client gets the change
    await again.write(request("triton"))
    assert endpoints_of(await again.read()) == [(E2.address, E2.port)]
    again.cancel()


async def test_one_change_reaches_a_hundred_streams(world: World) -> None:
    world.cache.mark_ready()
    calls = [world.sotw() for _ in range(100)]
    for call in calls:
        await call.write(request("triton"))
    firsts = [await call.read() for call in calls]
    for call, first in zip(calls, firsts, strict=True):
        await call.write(request("triton", version=first.version_info, nonce=first.nonce))
    await world.seen(Kind.ACK, 100)
    world.cache.set_cluster("triton", [E1, E2])
    seconds = [await call.read() for call in calls]
    assert {s.version_info for s in seconds} == {seconds[0].version_info}
    assert seconds[0].version_info != firsts[0].version_info
    for call in calls:
        call.cancel()


async def test_each_push_is_a_span_from_the_change_to_the_sent_answer(world: World) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_ON)  # as eds runs: every push traced
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.activate(provider)
    try:
        world.cache.mark_ready()
        call = world.sotw()
        await call.write(request("triton"))
        first = await call.read()
        await call.write(request("triton", version=first.version_info, nonce=first.nonce))
        await world.seen(Kind.ACK)
        changed = time.time_ns()
        world.cache.set_cluster("triton", [E1, E2])
        second = await call.read()
        await wait_for_state(lambda: len(exporter.get_finished_spans()) == 2, WAIT_S, "2 spans")
    finally:
        tracing.activate(None)
        call.cancel()
    answer, push = exporter.get_finished_spans()
    for span, response, reason in ((answer, first, "request"), (push, second, "change")):
        assert span.name == "push ClusterLoadAssignment"
        assert span.attributes is not None
        assert dict(span.attributes) == {
            "xds.type": "ClusterLoadAssignment", "xds.node": "test-proxy", "xds.api": "sotw",
            "xds.version": response.version_info, "xds.resources": 1,
            "inferline.push.reason": reason,
        }  # fmt: skip
    # A change's push starts when the cache changed: its length is the change's way out.
    assert push.start_time is not None and changed <= push.start_time + 5_000_000
    assert push.end_time is not None and push.start_time < push.end_time
