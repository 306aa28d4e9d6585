"""xDS resources from the cache: the messages, their versions, snapshot consistency."""

from __future__ import annotations

from envoy_data_plane.envoy.config.cluster.v3 import Cluster, ClusterDiscoveryType
from envoy_data_plane.envoy.config.core.v3 import HealthStatus
from envoy_data_plane.envoy.config.endpoint.v3 import ClusterLoadAssignment
from envoy_data_plane.envoy.config.listener.v3 import Listener
from envoy_data_plane.envoy.config.route.v3 import RouteConfiguration
from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager.v3 import (
    HttpConnectionManager,
)

from eds.cache import Endpoint, EndpointCache, Health, cluster_state
from eds.resources import (
    CLUSTERS,
    ENDPOINTS,
    LISTENERS,
    ROUTES,
    Snapshot,
    SnapshotBuilder,
    XdsResource,
    cluster_load_assignment,
    set_version,
)


def test_cluster_load_assignment_carries_health_weight_zone_and_name() -> None:
    state = cluster_state(
        "triton",
        [
            Endpoint("10.0.0.1", 8001, Health.HEALTHY, 2, "zone-a", "triton-0"),
            Endpoint("10.0.0.2", 8001, Health.DRAINING, 1, "zone-a", "triton-1"),
            Endpoint("10.0.0.3", 8001, Health.UNHEALTHY, 4, "zone-b"),
        ],
    )
    cla = ClusterLoadAssignment.parse(bytes(cluster_load_assignment(state)))
    assert cla.cluster_name == "triton"
    zones = {loc.locality.zone: loc for loc in cla.endpoints if loc.locality}
    assert set(zones) == {"zone-a", "zone-b"}
    assert zones["zone-a"].load_balancing_weight == 3
    assert zones["zone-b"].load_balancing_weight == 4
    a0, a1 = zones["zone-a"].lb_endpoints
    assert a0.endpoint is not None and a0.endpoint.address is not None
    assert a0.endpoint.address.socket_address is not None
    assert a0.endpoint.address.socket_address.address == "10.0.0.1"
    assert a0.endpoint.address.socket_address.port_value == 8001
    assert a0.endpoint.hostname == "triton-0"
    assert (a0.health_status, a0.load_balancing_weight) == (HealthStatus.HEALTHY, 2)
    assert a1.health_status == HealthStatus.DRAINING
    assert zones["zone-b"].lb_endpoints[0].health_status == HealthStatus.UNHEALTHY


def test_an_empty_cluster_is_an_assignment_with_no_endpoints() -> None:
    cla = ClusterLoadAssignment.parse(bytes(cluster_load_assignment(cluster_state("x", []))))
    assert cla.cluster_name == "x" and cla.endpoints == []


def ready_cache() -> EndpointCache:
    cache = EndpointCache(["triton", "batcher"])
    cache.set_cluster("triton", [Endpoint("10.0.0.1", 8001)])
    cache.mark_ready()
    return cache


def test_the_snapshot_has_every_type_for_every_cluster_and_is_consistent() -> None:
    snapshot = SnapshotBuilder(ready_cache()).snapshot()
    for type_url in (ENDPOINTS, CLUSTERS, ROUTES, LISTENERS):
        assert set(snapshot.of_type(type_url)) == {"triton", "batcher"}
    assert snapshot.ready
    assert snapshot.consistent() == []


def test_consistency_names_what_is_missing() -> None:
    listener = XdsResource(LISTENERS, "triton", "1", b"")
    snapshot = Snapshot(1, True, 0.0, {LISTENERS: {"triton": listener}})
    assert snapshot.consistent() == ["listener 'triton' routes to missing route config 'triton'"]


def test_resources_for_proxyless_grpc_reference_each_other_over_ads() -> None:
    snapshot = SnapshotBuilder(ready_cache()).snapshot()
    listener = Listener.parse(snapshot.of_type(LISTENERS)["triton"].body)
    assert listener.api_listener is not None and listener.api_listener.api_listener is not None
    manager = HttpConnectionManager.parse(listener.api_listener.api_listener.value)
    assert manager.rds is not None and manager.rds.route_config_name == "triton"
    assert manager.rds.config_source is not None and manager.rds.config_source.ads is not None
    assert [f.name for f in manager.http_filters] == ["envoy.filters.http.router"]
    route = RouteConfiguration.parse(snapshot.of_type(ROUTES)["triton"].body)
    action = route.virtual_hosts[0].routes[0].route
    assert action is not None and action.cluster == "triton"
    # no retries of gRPC's own: the client retries as Envoy would, within its budget
    # (inferline.retry)
    assert action.retry_policy is None
    cluster = Cluster.parse(snapshot.of_type(CLUSTERS)["triton"].body)
    assert cluster.type == ClusterDiscoveryType.EDS
    assert cluster.eds_cluster_config is not None
    assert cluster.eds_cluster_config.service_name == "triton"


def test_a_change_rebuilds_only_the_changed_cluster() -> None:
    cache = ready_cache()
    builder = SnapshotBuilder(cache)
    first = builder.snapshot()
    assert builder.snapshot() is first  # same revision: same snapshot
    cache.set_cluster("triton", [Endpoint("10.0.0.1", 8001), Endpoint("10.0.0.2", 8001)])
    second = builder.snapshot()
    assert second.revision > first.revision
    assert second.of_type(ENDPOINTS)["batcher"] is first.of_type(ENDPOINTS)["batcher"]
    assert second.of_type(ENDPOINTS)["triton"].version != first.of_type(ENDPOINTS)["triton"].version
    assert second.of_type(CLUSTERS)["triton"] is first.of_type(CLUSTERS)["triton"]


def test_versions_are_stable_across_builders() -> None:
    """A restarted control plane computes the same versions for the same endpoints."""
    one = SnapshotBuilder(ready_cache()).snapshot()
    two = SnapshotBuilder(ready_cache()).snapshot()
    for type_url in (ENDPOINTS, CLUSTERS, ROUTES, LISTENERS):
        assert {n: r.version for n, r in one.of_type(type_url).items()} == {
            n: r.version for n, r in two.of_type(type_url).items()
        }


def test_set_version_depends_on_names_and_versions_not_order() -> None:
    a, b = XdsResource(ENDPOINTS, "a", "1", b""), XdsResource(ENDPOINTS, "b", "2", b"")
    assert set_version([a, b]) == set_version([b, a])
    assert set_version([a]) != set_version([a, b])
    assert set_version([a]) != set_version([XdsResource(ENDPOINTS, "a", "3", b"")])  # version
    assert set_version([a]) != set_version([XdsResource(ENDPOINTS, "c", "1", b"")])  # name
    assert set_version([]) not in (set_version([a]), set_version([b]))
