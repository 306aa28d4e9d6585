"""Prometheus metrics of the control plane: ``inferline_eds_<thing>_<unit>``."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from eds.cache import EndpointCache, Health
from eds.resources import TYPES, short_name
from eds.streams import Kind, StreamEvent
from inferline.metrics import LATENCY_BUCKETS

CONNECTED = Gauge(
    "inferline_eds_connected_proxies",
    "xDS streams open now (one per proxy or gRPC client), by protocol",
    ["api"],
)
PUSHES = Counter(
    "inferline_eds_pushes_total",
    "xDS responses sent, by resource type and why (change: the cache changed; request)",
    ["type", "reason"],
)
PUSH_SECONDS = Histogram(
    "inferline_eds_push_duration_seconds",
    "From a change reaching the cache to its response written to a stream",
    ["type"],
    buckets=LATENCY_BUCKETS,
)
ACKS = Counter("inferline_eds_acks_total", "Responses a client accepted", ["type"])
NACKS = Counter(
    "inferline_eds_nacks_total",
    "Responses a client rejected (it keeps its previous version; see the log for its error)",
    ["type"],
)
ACK_SECONDS = Histogram(
    "inferline_eds_ack_duration_seconds",
    "From a response sent to the client's ACK or NACK of it",
    ["type"],
    buckets=LATENCY_BUCKETS,
)
CLUSTER_VERSION = Gauge(
    "inferline_eds_cluster_version_info",
    "The current version of each cluster's endpoints (always 1; the version is a label)",
    ["cluster", "version"],
)
ENDPOINTS = Gauge(
    "inferline_eds_endpoints",
    "Endpoints in the cache, by cluster and health",
    ["cluster", "health"],
)
CACHE_READY = Gauge(
    "inferline_eds_cache_ready", "1 once the discovery source has been read completely"
)
SOURCE_UPDATES = Counter(
    "inferline_eds_source_updates_total", "Changes a discovery source applied", ["source"]
)
SOURCE_ERRORS = Counter(
    "inferline_eds_source_errors_total",
    "Discovery source failures (unreadable file, API errors); the last good state stays",
    ["source"],
)


def declare(source: str) -> None:
    """Create every counter's series at 0 for the resource types served and the ``source``:
    a rate or an alert over them then sees the first NACK, not just the ones after it."""
    for type_url in TYPES:
        kind = short_name(type_url)
        ACKS.labels(kind)
        NACKS.labels(kind)
        for reason in ("change", "request"):
            PUSHES.labels(kind, reason)
    SOURCE_UPDATES.labels(source)
    SOURCE_ERRORS.labels(source)


def observe_event(event: StreamEvent) -> None:
    kind = short_name(event.type_url)
    if event.kind is Kind.ACK:
        ACKS.labels(kind).inc()
    elif event.kind is Kind.NACK:
        NACKS.labels(kind).inc()
    if event.latency_s is not None and event.kind in (Kind.ACK, Kind.NACK):
        ACK_SECONDS.labels(kind).observe(event.latency_s)


class CacheMetrics:
    """Keeps the per-cluster gauges in step with the cache (subscribe :meth:`update`)."""

    def __init__(self, cache: EndpointCache) -> None:
        self.cache = cache
        self._versions: dict[str, str] = {}
        self.update(frozenset(cache.clusters()))

    def update(self, changed: frozenset[str]) -> None:
        CACHE_READY.set(1 if self.cache.ready else 0)
        for name in changed:
            state = self.cache.get(name)
            old = self._versions.pop(name, None)
            if old is not None:
                CLUSTER_VERSION.remove(name, old)
                if state is None:
                    for health in Health:
                        ENDPOINTS.remove(name, str(health))
            if state is None:
                continue
            self._versions[name] = state.version
            CLUSTER_VERSION.labels(name, state.version).set(1)
            for health in Health:
                ENDPOINTS.labels(name, str(health)).set(state.count(health))
