"""EndpointSlices (discovery.k8s.io/v1, as JSON dicts) to cache endpoints. Pure.

* ``conditions.ready`` -> HEALTHY; serving but terminating -> DRAINING (finishes its
  requests, takes no new ones); anything else (starting, failing its readiness probe) ->
  UNHEALTHY. An endpoint that is gone from every slice is removed.
* ``zone`` -> the endpoint's locality zone; the pod (``targetRef``) name -> its host name.
* weight: the pod annotation ``inferline.io/weight`` (relative GPU capacity), looked up by
  the caller and passed in by pod UID; 1 when absent.
* the port: the slice's port named ``port_name``, or its only port.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from eds.cache import MAX_WEIGHT, Endpoint, Health

logger = logging.getLogger(__name__)

SERVICE_LABEL = "kubernetes.io/service-name"
WEIGHT_ANNOTATION = "inferline.io/weight"
RANK = {Health.HEALTHY: 0, Health.DRAINING: 1, Health.UNHEALTHY: 2}

Slice = Mapping[str, Any]


def service_of(slice_: Slice) -> str | None:
    labels = (slice_.get("metadata") or {}).get("labels") or {}
    name = labels.get(SERVICE_LABEL)
    return name if isinstance(name, str) else None


def slice_name(slice_: Slice) -> str:
    return str((slice_.get("metadata") or {}).get("name", ""))


def resource_version(obj: Mapping[str, Any]) -> str | None:
    version = (obj.get("metadata") or {}).get("resourceVersion")
    return str(version) if version else None


def health(conditions: Mapping[str, Any] | None) -> Health:
    """The EndpointSlice conditions as an EDS health (a missing ``ready`` means ready)."""
    conditions = conditions or {}
    ready = conditions.get("ready")
    serving = conditions.get("serving")
    terminating = bool(conditions.get("terminating"))
    if ready is None:
        ready = not terminating
    if serving is None:
        serving = ready
    if ready and not terminating:
        return Health.HEALTHY
    if serving and terminating:
        return Health.DRAINING
    return Health.UNHEALTHY


def port_of(slice_: Slice, port_name: str) -> int | None:
    ports = [p for p in slice_.get("ports") or [] if p.get("port")]
    named = [p for p in ports if p.get("name") == port_name]
    chosen = named or (ports if len(ports) == 1 else [])
    if not chosen:
        return None
    return int(chosen[0]["port"])


def pods_of(slices: Iterable[Slice]) -> list[tuple[str, str]]:
    """(uid, name) of every pod behind ``slices``: whose weight annotation to look up."""
    pods = {}
    for slice_ in slices:
        for endpoint in slice_.get("endpoints") or []:
            ref = endpoint.get("targetRef") or {}
            if ref.get("kind") == "Pod" and ref.get("uid") and ref.get("name"):
                pods[str(ref["uid"])] = str(ref["name"])
    return sorted(pods.items())


def parse_weight(value: object, where: str) -> int:
    if value is None:
        return 1
    try:
        weight = int(str(value).strip())
    except ValueError:
        weight = 0
    if not 1 <= weight <= MAX_WEIGHT:
        logger.warning(
            "%s: annotation %s=%r is not an integer in 1..%d; using 1",
            where,
            WEIGHT_ANNOTATION,
            value,
            MAX_WEIGHT,
        )
        return 1
    return weight


def endpoints(
    slices: Iterable[Slice], port_name: str, weights: Mapping[str, int] | None = None
) -> tuple[Endpoint, ...]:
    """One service's endpoints from all its slices; an address in two slices (a slice being
    replaced) counts once, with its best health."""
    weights = weights or {}
    best: dict[tuple[str, int], Endpoint] = {}
    for slice_ in slices:
        if slice_.get("addressType") not in (None, "IPv4", "IPv6"):
            continue  # FQDN slices: Envoy's EDS wants IP addresses
        port = port_of(slice_, port_name)
        if port is None:
            logger.warning(
                "EndpointSlice %s has no port named %r (and not exactly one port); skipped",
                slice_name(slice_),
                port_name,
            )
            continue
        for item in slice_.get("endpoints") or []:
            addresses = item.get("addresses") or []
            if not addresses:
                continue
            ref = item.get("targetRef") or {}
            endpoint = Endpoint(
                address=str(addresses[0]),  # consumers use the first (the API says so)
                port=port,
                health=health(item.get("conditions")),
                weight=weights.get(str(ref.get("uid", "")), 1),
                zone=str(item.get("zone") or ""),
                name=str(ref.get("name") or item.get("hostname") or ""),
            )
            current = best.get(endpoint.key)
            if current is None or RANK[endpoint.health] < RANK[current.health]:
                best[endpoint.key] = endpoint
    return tuple(best.values())
