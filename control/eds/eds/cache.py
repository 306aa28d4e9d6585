"""The endpoint cache: every cluster's endpoints, versioned by content. No gRPC, no I/O.

Like go-control-plane's linear cache, it holds one resource type (a cluster's endpoints) for
the whole fleet of proxies; discovery sources write it, the xDS server only reads it. A
cluster's version is a hash of its content, so the same endpoints always have the same
version — after a control-plane restart Envoy's last version is still the current one.

Subscribers are plain callbacks, called synchronously after each change with the names of
the clusters that changed; the xDS server turns them into wake-ups of its streams.
"""

from __future__ import annotations

import enum
import hashlib
import logging
import time
import types
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

logger = logging.getLogger(__name__)

# Envoy caps the sum of a locality's weights at 2^32 - 1; this keeps it far below.
MAX_WEIGHT = 65535


class Health(enum.StrEnum):
    """An endpoint's health as the discovery source sees it (Envoy's EDS health status)."""

    HEALTHY = "HEALTHY"  # takes new requests
    DRAINING = "DRAINING"  # finishes what it has, takes nothing new (scale-down, terminating pod)
    UNHEALTHY = "UNHEALTHY"  # known, takes nothing (a pod that is not ready yet)


@dataclass(frozen=True, order=True)
class Endpoint:
    """One backend of a cluster. ``(address, port)`` identifies it within the cluster."""

    address: str
    port: int
    health: Health = Health.HEALTHY
    weight: int = 1  # relative capacity: a GPU twice as fast gets weight 2
    zone: str = ""  # Envoy locality zone
    name: str = ""  # shown by Envoy as the host name: a replica or pod name

    def __post_init__(self) -> None:
        if not self.address:
            raise ValueError("endpoint address must not be empty")
        if not 0 < self.port < 65536:
            raise ValueError(f"endpoint port {self.port} is not a TCP port (1-65535)")
        if not 1 <= self.weight <= MAX_WEIGHT:
            raise ValueError(f"endpoint weight {self.weight} must be in 1..{MAX_WEIGHT}")
        if not isinstance(self.health, Health):
            raise ValueError(f"endpoint health {self.health!r} is not one of {list(Health)}")

    @property
    def key(self) -> tuple[str, int]:
        return (self.address, self.port)


@dataclass(frozen=True)
class ClusterState:
    """A cluster's endpoints (sorted, one per address:port) and their content version."""

    name: str
    endpoints: tuple[Endpoint, ...]
    version: str

    def count(self, health: Health) -> int:
        return sum(1 for e in self.endpoints if e.health is health)


def normalise(endpoints: Iterable[Endpoint]) -> tuple[Endpoint, ...]:
    """Sorted by address and port; of two entries for one address:port the last one wins."""
    unique = {e.key: e for e in endpoints}
    return tuple(sorted(unique.values(), key=lambda e: (e.address, e.port)))


def content_version(name: str, endpoints: tuple[Endpoint, ...]) -> str:
    """A short, stable hash of a cluster's content: equal content, equal version."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(name.encode())
    for e in endpoints:
        digest.update(
            f"\0{e.address}\0{e.port}\0{e.health}\0{e.weight}\0{e.zone}\0{e.name}".encode()
        )
    return digest.hexdigest()


def cluster_state(name: str, endpoints: Iterable[Endpoint]) -> ClusterState:
    ordered = normalise(endpoints)
    return ClusterState(name, ordered, content_version(name, ordered))


Listener = Callable[[frozenset[str]], None]


class EndpointCache:
    """Clusters by name. ``declared`` clusters always exist, with no endpoints until a source
    fills them, so a proxy that asks for one gets an answer ("no endpoints") at once instead of
    waiting out its initial-fetch timeout.

    The cache starts *not ready*; a source calls :meth:`mark_ready` after its first complete
    read (the endpoints file parsed, the first Kubernetes list). Until then the server answers
    nobody, so a restarted control plane never pushes an empty cluster over a good one.
    """

    def __init__(
        self, declared: Iterable[str] = (), clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._declared = tuple(dict.fromkeys(declared))
        self._clusters: dict[str, ClusterState] = {n: cluster_state(n, ()) for n in self._declared}
        self._listeners: list[Listener] = []
        self._ready = False
        self._revision = 0
        self._clock = clock
        self.changed_at = clock()

    # -- reading ----------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def revision(self) -> int:
        """Increments on every change (and on becoming ready)."""
        return self._revision

    @property
    def declared(self) -> tuple[str, ...]:
        return self._declared

    def clusters(self) -> Mapping[str, ClusterState]:
        """A read-only view of every cluster, by name."""
        return types.MappingProxyType(self._clusters)

    def get(self, name: str) -> ClusterState | None:
        return self._clusters.get(name)

    # -- writing ----------------------------------------------------------------------------

    def set_cluster(self, name: str, endpoints: Iterable[Endpoint]) -> bool:
        """Replace one cluster's endpoints; True if that changed anything."""
        return bool(self.update({name: endpoints}))

    def remove_cluster(self, name: str) -> bool:
        """Forget a cluster (a declared one is emptied instead); True if that changed anything."""
        return bool(self.update({name: None}))

    def replace(self, clusters: Mapping[str, Iterable[Endpoint]]) -> frozenset[str]:
        """Make ``clusters`` the whole content: clusters not named are removed (declared ones
        emptied). Returns the names that changed."""
        update: dict[str, Iterable[Endpoint] | None] = {n: None for n in self._clusters}
        update.update(clusters)
        return self.update(update)

    def update(self, clusters: Mapping[str, Iterable[Endpoint] | None]) -> frozenset[str]:
        """Set (or, with ``None``, remove) several clusters at once; one notification."""
        changed: set[str] = set()
        for name, endpoints in clusters.items():
            if not name:
                raise ValueError("cluster name must not be empty")
            if endpoints is None and name not in self._declared:
                if self._clusters.pop(name, None) is not None:
                    changed.add(name)
                continue
            state = cluster_state(name, endpoints or ())
            current = self._clusters.get(name)
            if current is None or current.version != state.version:
                self._clusters[name] = state
                changed.add(name)
        if changed:
            self._changed(frozenset(changed))
        return frozenset(changed)

    def mark_ready(self) -> None:
        """The source has read everything once: from now on the server answers."""
        if not self._ready:
            self._ready = True
            logger.info("endpoint cache ready: %s", self.describe())
            self._changed(frozenset(self._clusters))

    def describe(self) -> str:
        parts = []
        for name, state in sorted(self._clusters.items()):
            healthy = state.count(Health.HEALTHY)
            parts.append(f"{name}={healthy}/{len(state.endpoints)}")
        return ", ".join(parts) or "(no clusters)"

    # -- subscribers ------------------------------------------------------------------------

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener(changed_names)`` after every change; returns the unsubscriber."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _changed(self, names: frozenset[str]) -> None:
        self._revision += 1
        self.changed_at = self._clock()
        for listener in list(self._listeners):
            listener(names)
