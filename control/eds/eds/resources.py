"""xDS resources built from the cache: ClusterLoadAssignment for every cluster, and the
Listener, RouteConfiguration and Cluster that a proxyless gRPC client needs to dial
``xds:///<cluster>``. No gRPC here: messages are envoy-data-plane (betterproto2) dataclasses.

A :class:`Snapshot` is every resource of every type at one cache revision, serialised once
and shared by every stream; like go-control-plane's snapshot it can check that it is
consistent (every route's cluster exists, every cluster's endpoints exist).
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from envoy_data_plane.envoy.config.cluster import v3 as cluster_v3
from envoy_data_plane.envoy.config.core import v3 as core_v3
from envoy_data_plane.envoy.config.endpoint import v3 as endpoint_v3
from envoy_data_plane.envoy.config.listener import v3 as listener_v3
from envoy_data_plane.envoy.config.route import v3 as route_v3
from envoy_data_plane.envoy.extensions.filters.http.router import v3 as router_v3
from envoy_data_plane.envoy.extensions.filters.network.http_connection_manager import (
    v3 as hcm_v3,
)
from envoy_data_plane.google.protobuf import Any as AnyProto

from eds.cache import ClusterState, EndpointCache, Health

PREFIX = "type.googleapis.com/"
ENDPOINTS = PREFIX + "envoy.config.endpoint.v3.ClusterLoadAssignment"
CLUSTERS = PREFIX + "envoy.config.cluster.v3.Cluster"
LISTENERS = PREFIX + "envoy.config.listener.v3.Listener"
ROUTES = PREFIX + "envoy.config.route.v3.RouteConfiguration"
HCM = PREFIX + "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = PREFIX + "envoy.extensions.filters.http.router.v3.Router"

TYPES = (CLUSTERS, ENDPOINTS, LISTENERS, ROUTES)
# Listener and Cluster are "full state" types: an SotW response carries all of them, and a
# name missing from a response means the resource is gone.
FULL_STATE_TYPES = frozenset({CLUSTERS, LISTENERS})

HEALTH = {
    Health.HEALTHY: core_v3.HealthStatus.HEALTHY,
    Health.DRAINING: core_v3.HealthStatus.DRAINING,
    Health.UNHEALTHY: core_v3.HealthStatus.UNHEALTHY,
}


def short_name(type_url: str) -> str:
    """``ClusterLoadAssignment`` for its type URL: the label used in logs and metrics."""
    return type_url.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class XdsResource:
    """One named resource, serialised, with its version."""

    type_url: str
    name: str
    version: str
    body: bytes

    def packed(self) -> AnyProto:
        return AnyProto(type_url=self.type_url, value=self.body)


def versioned(type_url: str, name: str, body: bytes, version: str | None = None) -> XdsResource:
    if version is None:
        version = hashlib.blake2b(body, digest_size=8).hexdigest()
    return XdsResource(type_url, name, version, body)


def set_version(resources: Iterable[XdsResource]) -> str:
    """The version of a response holding ``resources``: a hash of their names and versions."""
    digest = hashlib.blake2b(digest_size=8)
    for r in sorted(resources, key=lambda r: r.name):
        digest.update(f"{r.name}\0{r.version}\0".encode())
    return digest.hexdigest()


# -- building messages ------------------------------------------------------------------------


@dataclass(frozen=True)
class ProxylessSettings:
    """What the Cluster and route resources for proxyless gRPC clients say."""

    connect_timeout_s: float = 1.0
    # No retry policy: gRPC's (A44) would retry every UNAVAILABLE, those relayed from further
    # down (retried there already) included, with no budget. A proxyless client retries once
    # itself, within a budget, what its replica failed (inferline.retry): one layer retries.


def cluster_load_assignment(state: ClusterState) -> endpoint_v3.ClusterLoadAssignment:
    """Endpoints grouped by zone (Envoy's locality), weights and EDS health status."""
    by_zone: dict[str, list[endpoint_v3.LbEndpoint]] = {}
    weights: dict[str, int] = {}
    for e in state.endpoints:
        address = core_v3.Address(
            socket_address=core_v3.SocketAddress(address=e.address, port_value=e.port)
        )
        by_zone.setdefault(e.zone, []).append(
            endpoint_v3.LbEndpoint(
                endpoint=endpoint_v3.Endpoint(address=address, hostname=e.name),
                health_status=HEALTH[e.health],
                load_balancing_weight=e.weight,
            )
        )
        weights[e.zone] = weights.get(e.zone, 0) + e.weight
    return endpoint_v3.ClusterLoadAssignment(
        cluster_name=state.name,
        endpoints=[
            endpoint_v3.LocalityLbEndpoints(
                locality=core_v3.Locality(zone=zone),
                lb_endpoints=lb_endpoints,
                # gRPC clients ignore localities without a weight; Envoy ignores the weight
                # unless the cluster asks for locality-weighted balancing.
                load_balancing_weight=weights[zone],
            )
            for zone, lb_endpoints in sorted(by_zone.items())
        ],
    )


def _ads() -> core_v3.ConfigSource:
    return core_v3.ConfigSource(
        ads=core_v3.AggregatedConfigSource(), resource_api_version=core_v3.ApiVersion.V3
    )


def cluster(name: str, settings: ProxylessSettings) -> cluster_v3.Cluster:
    """An EDS cluster whose endpoints come over the same ADS stream."""
    return cluster_v3.Cluster(
        name=name,
        type=cluster_v3.ClusterDiscoveryType.EDS,
        eds_cluster_config=cluster_v3.ClusterEdsClusterConfig(eds_config=_ads(), service_name=name),
        connect_timeout=datetime.timedelta(seconds=settings.connect_timeout_s),
        lb_policy=cluster_v3.ClusterLbPolicy.ROUND_ROBIN,
    )


def route_configuration(name: str, settings: ProxylessSettings) -> route_v3.RouteConfiguration:
    """Everything to cluster ``name``; no retries (see :class:`ProxylessSettings`)."""
    return route_v3.RouteConfiguration(
        name=name,
        virtual_hosts=[
            route_v3.VirtualHost(
                name=name,
                domains=["*"],
                routes=[
                    route_v3.Route(
                        match=route_v3.RouteMatch(prefix=""),
                        route=route_v3.RouteAction(cluster=name),
                    )
                ],
            )
        ],
    )


def listener(name: str) -> listener_v3.Listener:
    """The API listener gRPC looks up for target ``xds:///<name>``: routes over RDS."""
    manager = hcm_v3.HttpConnectionManager(
        stat_prefix=name,
        rds=hcm_v3.Rds(config_source=_ads(), route_config_name=name),
        http_filters=[
            hcm_v3.HttpFilter(
                name="envoy.filters.http.router",
                typed_config=AnyProto(type_url=ROUTER, value=bytes(router_v3.Router())),
            )
        ],
    )
    return listener_v3.Listener(
        name=name,
        api_listener=listener_v3.ApiListener(
            api_listener=AnyProto(type_url=HCM, value=bytes(manager))
        ),
    )


# -- snapshots --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Snapshot:
    """Every resource of every type at one cache revision."""

    revision: int
    ready: bool
    changed_at: float  # monotonic time of the cache change this snapshot reflects
    resources: Mapping[str, Mapping[str, XdsResource]] = field(default_factory=dict)

    def of_type(self, type_url: str) -> Mapping[str, XdsResource]:
        return self.resources.get(type_url, {})

    def consistent(self) -> list[str]:
        """What is missing for a client that follows the references (empty: consistent)."""
        problems = []
        for name in self.of_type(LISTENERS):
            if name not in self.of_type(ROUTES):
                problems.append(f"listener {name!r} routes to missing route config {name!r}")
        for name in self.of_type(ROUTES):
            if name not in self.of_type(CLUSTERS):
                problems.append(f"route config {name!r} sends to missing cluster {name!r}")
        for name in self.of_type(CLUSTERS):
            if name not in self.of_type(ENDPOINTS):
                problems.append(f"cluster {name!r} has no ClusterLoadAssignment")
        return problems


class SnapshotBuilder:
    """Builds the current :class:`Snapshot` from the cache, serialising each resource once.

    Endpoint assignments are memoised by cluster version, so a change to one cluster
    serialises one message however many proxies are connected; the Listener, route and
    Cluster of a name depend only on the name.
    """

    def __init__(self, cache: EndpointCache, settings: ProxylessSettings | None = None) -> None:
        self.cache = cache
        self.settings = settings or ProxylessSettings()
        self._snapshot: Snapshot | None = None
        self._endpoints: dict[str, XdsResource] = {}
        self._static: dict[tuple[str, str], XdsResource] = {}

    def snapshot(self) -> Snapshot:
        cache = self.cache
        if self._snapshot is not None and self._snapshot.revision == cache.revision:
            return self._snapshot
        endpoints: dict[str, XdsResource] = {}
        for name, state in cache.clusters().items():
            built = self._endpoints.get(name)
            if built is None or built.version != state.version:
                body = bytes(cluster_load_assignment(state))
                built = versioned(ENDPOINTS, name, body, state.version)
            endpoints[name] = built
        self._endpoints = endpoints
        resources = {
            ENDPOINTS: endpoints,
            CLUSTERS: {n: self._named(CLUSTERS, n) for n in endpoints},
            ROUTES: {n: self._named(ROUTES, n) for n in endpoints},
            LISTENERS: {n: self._named(LISTENERS, n) for n in endpoints},
        }
        self._snapshot = Snapshot(cache.revision, cache.ready, cache.changed_at, resources)
        return self._snapshot

    def _named(self, type_url: str, name: str) -> XdsResource:
        built = self._static.get((type_url, name))
        if built is None:
            if type_url == CLUSTERS:
                body = bytes(cluster(name, self.settings))
            elif type_url == ROUTES:
                body = bytes(route_configuration(name, self.settings))
            else:
                body = bytes(listener(name))
            built = versioned(type_url, name, body)
            self._static[(type_url, name)] = built
        return built
