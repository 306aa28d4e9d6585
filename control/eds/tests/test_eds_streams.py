"""The xDS stream state machines, state of the world and delta, without gRPC."""

from __future__ import annotations

import pytest
from envoy_data_plane.envoy.config.core.v3 import Node
from envoy_data_plane.envoy.service.discovery.v3 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from envoy_data_plane.google.rpc import Status

from eds.cache import Endpoint, EndpointCache
from eds.delta import DeltaStream
from eds.resources import CLUSTERS, ENDPOINTS, LISTENERS, TYPES, SnapshotBuilder
from eds.sotw import SotwStream
from eds.streams import Kind

from .xds_requests import NODE, eds_request

E1 = Endpoint("10.0.0.1", 8001)
E2 = Endpoint("10.0.0.2", 8001)


class Clock:
    """A monotonic clock the test moves by hand: latencies are exact, not measured."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def world() -> tuple[EndpointCache, SnapshotBuilder]:
    cache = EndpointCache(["triton", "batcher"])
    cache.set_cluster("triton", [E1])
    cache.mark_ready()
    return cache, SnapshotBuilder(cache)


def ack(response: DiscoveryResponse, *names: str) -> DiscoveryRequest:
    return eds_request(*names, version=response.version_info, nonce=response.nonce)


# -- state of the world -------------------------------------------------------------------------


def test_sotw_answers_a_subscription_and_is_quiet_after_the_ack() -> None:
    _, builder = world()
    clock = Clock()
    stream = SotwStream(TYPES, clock=clock)
    event = stream.on_request(eds_request("triton"))
    assert (event.kind, event.node_id, event.names) == (Kind.SUBSCRIBE, NODE, ("triton",))
    assert event.latency_s is None  # a subscription answers no response
    [response] = stream.responses(builder.snapshot())
    assert response.type_url == ENDPOINTS and len(response.resources) == 1
    clock.now += 0.25
    event = stream.on_request(ack(response, "triton"))
    assert event.kind is Kind.ACK and event.version == response.version_info
    assert event.latency_s == pytest.approx(0.25)  # from the response to its ACK
    assert stream.acked_version(ENDPOINTS) == response.version_info
    assert stream.responses(builder.snapshot()) == []


def test_sotw_waits_for_a_ready_cache() -> None:
    cache = EndpointCache(["triton"])
    builder = SnapshotBuilder(cache)
    stream = SotwStream(TYPES)
    stream.on_request(eds_request("triton"))
    assert stream.responses(builder.snapshot()) == []
    cache.mark_ready()
    assert len(stream.responses(builder.snapshot())) == 1


def test_sotw_pushes_a_change_with_a_new_version_and_nonce() -> None:
    cache, builder = world()
    stream = SotwStream(TYPES)
    stream.on_request(eds_request("triton"))
    [first] = stream.responses(builder.snapshot())
    stream.on_request(ack(first, "triton"))
    cache.set_cluster("triton", [E1, E2])
    [second] = stream.responses(builder.snapshot())
    assert second.version_info != first.version_info and second.nonce != first.nonce
    cache.set_cluster("batcher", [E2])  # not subscribed: nothing to send
    stream.on_request(ack(second, "triton"))
    assert stream.responses(builder.snapshot()) == []


def test_sotw_nack_keeps_the_last_good_version_and_is_never_resent() -> None:
    cache, builder = world()
    clock = Clock()
    stream = SotwStream(TYPES, clock=clock)
    stream.on_request(eds_request("triton"))
    [good] = stream.responses(builder.snapshot())
    stream.on_request(ack(good, "triton"))
    clock.now += 5.0
    cache.set_cluster("triton", [E2])
    [bad] = stream.responses(builder.snapshot())
    clock.now += 0.5
    event = stream.on_request(
        eds_request("triton", version=good.version_info, nonce=bad.nonce, error="malformed IP")
    )
    assert event.kind is Kind.NACK
    assert (event.version, event.error) == (bad.version_info, "malformed IP")
    assert event.latency_s == pytest.approx(0.5)  # since the rejected response, not the first
    assert stream.acked_version(ENDPOINTS) == good.version_info
    for _ in range(3):  # no loop: the rejected version is not sent again
        assert stream.responses(builder.snapshot()) == []
    cache.set_cluster("triton", [E1, E2])  # the next change goes out
    [fixed] = stream.responses(builder.snapshot())
    assert fixed.version_info not in (good.version_info, bad.version_info)


def test_sotw_ignores_a_stale_nonce() -> None:
    cache, builder = world()
    stream = SotwStream(TYPES)
    stream.on_request(eds_request("triton"))
    [first] = stream.responses(builder.snapshot())
    cache.set_cluster("triton", [E2])
    [second] = stream.responses(builder.snapshot())
    event = stream.on_request(ack(first, "triton", "batcher"))  # crossed with `second`
    assert event.kind is Kind.STALE
    assert stream.acked_version(ENDPOINTS) == ""
    assert stream.responses(builder.snapshot()) == []  # the name change was ignored too
    event = stream.on_request(ack(second, "triton", "batcher"))
    assert event.kind is Kind.ACK
    [third] = stream.responses(builder.snapshot())
    assert {r.type_url for r in third.resources} == {ENDPOINTS}
    assert len(third.resources) == 2


def test_sotw_eds_with_no_names_means_none_but_cds_means_all() -> None:
    _, builder = world()
    stream = SotwStream(TYPES)
    stream.on_request(eds_request())
    [eds] = stream.responses(builder.snapshot())
    assert eds.resources == []
    stream.on_request(DiscoveryRequest(type_url=CLUSTERS))
    responses = stream.responses(builder.snapshot())
    [cds] = [r for r in responses if r.type_url == CLUSTERS]
    assert len(cds.resources) == 2


def test_sotw_reports_types_it_does_not_serve() -> None:
    stream = SotwStream([ENDPOINTS], ENDPOINTS)
    assert stream.on_request(DiscoveryRequest(type_url=LISTENERS)).kind is Kind.UNSUPPORTED
    event = stream.on_request(DiscoveryRequest(resource_names=["triton"]))  # no type: EDS
    assert (event.kind, event.type_url) == (Kind.SUBSCRIBE, ENDPOINTS)


def test_sotw_answers_a_reconnect_even_at_the_current_version() -> None:
    _, builder = world()
    current = builder.snapshot()
    stream = SotwStream(TYPES)
    first = SotwStream(TYPES)
    first.on_request(eds_request("triton"))
    [before] = first.responses(current)
    event = stream.on_request(eds_request("triton", version=before.version_info))
    assert event.kind is Kind.SUBSCRIBE and event.version == before.version_info
    [again] = stream.responses(current)
    assert again.version_info == before.version_info


# -- delta --------------------------------------------------------------------------------------


def delta_request(
    subscribe: list[str] | None = None,
    unsubscribe: list[str] | None = None,
    nonce: str = "",
    error: str = "",
    initial: dict[str, str] | None = None,
    type_url: str = ENDPOINTS,
) -> DeltaDiscoveryRequest:
    return DeltaDiscoveryRequest(
        node=Node(id="envoy-2"),
        type_url=type_url,
        resource_names_subscribe=subscribe or [],
        resource_names_unsubscribe=unsubscribe or [],
        response_nonce=nonce,
        error_detail=Status(code=3, message=error) if error else None,
        initial_resource_versions=initial or {},
    )


def names(response: DeltaDiscoveryResponse) -> list[str]:
    return [r.name for r in response.resources]


def test_delta_sends_only_what_changed() -> None:
    cache, builder = world()
    stream = DeltaStream(TYPES)
    assert stream.on_request(delta_request(["triton", "batcher"])).kind is Kind.SUBSCRIBE
    [first] = stream.responses(builder.snapshot())
    assert sorted(names(first)) == ["batcher", "triton"]
    assert stream.on_request(delta_request(nonce=first.nonce)).kind is Kind.ACK
    assert stream.responses(builder.snapshot()) == []
    cache.set_cluster("triton", [E1, E2])
    [second] = stream.responses(builder.snapshot())
    assert names(second) == ["triton"] and second.removed_resources == []
    assert second.resources[0].version == cache.get("triton").version  # type: ignore[union-attr]


def test_delta_removes_and_unsubscribes() -> None:
    cache, builder = world()
    cache.set_cluster("extra", [E2])
    stream = DeltaStream(TYPES)
    stream.on_request(delta_request(["triton", "extra"]))
    [first] = stream.responses(builder.snapshot())
    stream.on_request(delta_request(nonce=first.nonce))
    cache.remove_cluster("extra")
    [second] = stream.responses(builder.snapshot())
    assert second.resources == [] and second.removed_resources == ["extra"]
    stream.on_request(delta_request(unsubscribe=["triton"], nonce=second.nonce))
    cache.set_cluster("triton", [E2])
    assert stream.responses(builder.snapshot()) == []


def test_delta_reconnect_with_initial_versions_sends_nothing_new() -> None:
    cache, builder = world()
    version = cache.get("triton").version  # type: ignore[union-attr]
    stream = DeltaStream(TYPES)
    stream.on_request(delta_request(["triton"], initial={"triton": version}))
    assert stream.responses(builder.snapshot()) == []
    stale = DeltaStream(TYPES)
    stale.on_request(delta_request(["triton"], initial={"triton": "old"}))
    [response] = stale.responses(builder.snapshot())
    assert names(response) == ["triton"]


def test_delta_resubscribing_resends_even_an_unchanged_resource() -> None:
    _, builder = world()
    stream = DeltaStream(TYPES)
    stream.on_request(delta_request(["triton"]))
    [first] = stream.responses(builder.snapshot())
    stream.on_request(delta_request(["triton"], nonce=first.nonce))
    [again] = stream.responses(builder.snapshot())
    assert names(again) == ["triton"]


def test_delta_nack_is_reported_and_not_resent() -> None:
    cache, builder = world()
    clock = Clock()
    stream = DeltaStream(TYPES, clock=clock)
    stream.on_request(delta_request(["triton"]))
    [first] = stream.responses(builder.snapshot())
    clock.now += 0.125
    event = stream.on_request(delta_request(nonce=first.nonce))
    assert event.kind is Kind.ACK and event.latency_s == pytest.approx(0.125)
    clock.now += 5.0
    cache.set_cluster("triton", [E2])
    [bad] = stream.responses(builder.snapshot())
    clock.now += 0.75
    event = stream.on_request(delta_request(nonce=bad.nonce, error="rejected"))
    assert event.kind is Kind.NACK and event.error == "rejected"
    assert event.latency_s == pytest.approx(0.75)
    assert stream.responses(builder.snapshot()) == []
    cache.set_cluster("triton", [E1, E2])
    assert names(stream.responses(builder.snapshot())[0]) == ["triton"]


def test_delta_stale_nonce_still_applies_the_subscription() -> None:
    cache, builder = world()
    stream = DeltaStream(TYPES)
    stream.on_request(delta_request(["triton"]))
    stream.responses(builder.snapshot())
    cache.set_cluster("triton", [E2])
    stream.responses(builder.snapshot())
    event = stream.on_request(delta_request(["batcher"], nonce="1"))
    assert event.kind is Kind.STALE
    [response] = stream.responses(builder.snapshot())
    assert names(response) == ["batcher"]


def test_delta_wildcard_for_clusters_includes_new_ones_and_removals() -> None:
    cache, builder = world()
    stream = DeltaStream(TYPES)
    stream.on_request(delta_request(type_url=CLUSTERS))
    [first] = stream.responses(builder.snapshot())
    assert sorted(names(first)) == ["batcher", "triton"]
    cache.set_cluster("extra", [E1])
    [second] = stream.responses(builder.snapshot())
    assert names(second) == ["extra"]
    cache.remove_cluster("extra")
    [third] = stream.responses(builder.snapshot())
    assert third.removed_resources == ["extra"]


def test_delta_subscribing_to_an_unknown_name_says_it_does_not_exist_once() -> None:
    _, builder = world()
    stream = DeltaStream(TYPES)
    stream.on_request(delta_request(["nowhere"]))
    [response] = stream.responses(builder.snapshot())
    assert response.resources == [] and response.removed_resources == ["nowhere"]
    assert stream.responses(builder.snapshot()) == []
