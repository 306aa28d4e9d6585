"""The endpoints file: the local stack's list of backends per cluster, read by the file source.

Format (YAML; JSON is YAML too)::

    clusters:
      triton:
        - {address: 127.0.0.1, port: 8001, health: HEALTHY, weight: 1, zone: local, name: triton-0}
        - {address: 127.0.0.1, port: 8011, health: DRAINING, name: triton-1}
      batcher:
        - {address: 127.0.0.1, port: 8092}

``address`` (an IP literal: Envoy does not resolve names in EDS) and ``port`` are required;
``health`` (HEALTHY, DRAINING or UNHEALTHY) defaults to HEALTHY, ``weight`` (1-65535) to 1,
``zone`` and ``name`` to empty. A cluster may be listed with no endpoints (``[]``).

Writers replace the file atomically (a temporary file in the same directory, then rename),
so the reader never sees half a file; :func:`edit` also holds a lock so that two writers
(two ``make scale`` runs) do not lose each other's changes.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from eds.cache import MAX_WEIGHT, Endpoint, Health

Clusters = dict[str, tuple[Endpoint, ...]]

CLUSTER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
FIELDS = {"address", "port", "health", "weight", "zone", "name"}
HEADER = "# Endpoints per cluster, read by control/eds (file source). Rewritten atomically.\n"


class EndpointsFileError(ValueError):
    """The endpoints file cannot be used; the message says where and why."""


def parse(text: str, source: str = "endpoints file") -> Clusters:
    """Parse and validate the file's text; raise :class:`EndpointsFileError` naming the entry."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise EndpointsFileError(f"{source}: not valid YAML or JSON: {exc}") from None
    if data is None:
        data = {"clusters": {}}
    if not isinstance(data, dict) or not isinstance(data.get("clusters", {}), dict):
        raise EndpointsFileError(f"{source}: expected a mapping with a 'clusters' mapping")
    unknown = set(data) - {"clusters"}
    if unknown:
        raise EndpointsFileError(f"{source}: unknown top-level keys {sorted(unknown)}")
    clusters: Clusters = {}
    for name, entries in (data.get("clusters") or {}).items():
        where = f"{source}: cluster {name!r}"
        if not isinstance(name, str) or not CLUSTER_NAME.match(name):
            raise EndpointsFileError(f"{where}: a cluster name is letters, digits, '_', '.', '-'")
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            raise EndpointsFileError(f"{where}: expected a list of endpoints")
        endpoints = [_endpoint(entry, f"{where}[{i}]") for i, entry in enumerate(entries)]
        seen: set[tuple[str, int]] = set()
        for i, e in enumerate(endpoints):
            if e.key in seen:
                raise EndpointsFileError(f"{where}[{i}]: {e.address}:{e.port} is listed twice")
            seen.add(e.key)
        clusters[name] = tuple(endpoints)
    return clusters


def _endpoint(entry: Any, where: str) -> Endpoint:
    if not isinstance(entry, dict):
        raise EndpointsFileError(f"{where}: expected a mapping with address and port")
    unknown = set(entry) - FIELDS
    if unknown:
        raise EndpointsFileError(
            f"{where}: unknown keys {sorted(unknown)}; known: {sorted(FIELDS)}"
        )
    address = entry.get("address")
    if not isinstance(address, str):
        raise EndpointsFileError(f"{where}: 'address' must be an IP address")
    try:
        ipaddress.ip_address(address)
    except ValueError:
        raise EndpointsFileError(
            f"{where}: address {address!r} is not an IP address (Envoy does not resolve "
            "host names in EDS; write 127.0.0.1, not localhost)"
        ) from None
    port = entry.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise EndpointsFileError(f"{where}: 'port' must be a TCP port (1-65535), got {port!r}")
    health_text = str(entry.get("health", "HEALTHY")).upper()
    if health_text not in Health.__members__:
        raise EndpointsFileError(
            f"{where}: health {entry.get('health')!r} is not one of {', '.join(Health)}"
        )
    weight = entry.get("weight", 1)
    if not isinstance(weight, int) or isinstance(weight, bool) or not 1 <= weight <= MAX_WEIGHT:
        raise EndpointsFileError(f"{where}: weight must be an integer 1..{MAX_WEIGHT}")
    zone, name = entry.get("zone", ""), entry.get("name", "")
    if not isinstance(zone, str) or not isinstance(name, str):
        raise EndpointsFileError(f"{where}: 'zone' and 'name' must be strings")
    return Endpoint(address, port, Health(health_text), weight, zone, name)


def load(path: Path) -> Clusters:
    """Read and parse ``path``; OSError if it cannot be read, EndpointsFileError if invalid."""
    return parse(path.read_text(encoding="utf-8"), str(path))


def dump(clusters: Mapping[str, Iterable[Endpoint]]) -> str:
    """The file's text for ``clusters``; :func:`parse` reads it back to the same clusters."""
    data: dict[str, Any] = {"clusters": {}}
    for name in sorted(clusters):
        entries = []
        for e in clusters[name]:
            entry: dict[str, Any] = {"address": e.address, "port": e.port, "health": str(e.health)}
            if e.weight != 1:
                entry["weight"] = e.weight
            if e.zone:
                entry["zone"] = e.zone
            if e.name:
                entry["name"] = e.name
            entries.append(entry)
        data["clusters"][name] = entries
    return HEADER + yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def write(path: Path, clusters: Mapping[str, Iterable[Endpoint]]) -> None:
    """Replace ``path`` atomically: readers see the old file or the new one, never a mix."""
    text = dump(clusters)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        Path(tmp).replace(path)
    except BaseException:
        with contextlib.suppress(OSError):
            Path(tmp).unlink()
        raise


@contextlib.contextmanager
def edit(path: Path) -> Iterator[dict[str, list[Endpoint]]]:
    """Read-modify-write under an exclusive lock (``<path>.lock``); written atomically on exit.

    A missing file starts empty. Nothing is written if the block raises.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            current = load(path) if path.exists() else {}
            editable = {name: list(endpoints) for name, endpoints in current.items()}
            yield editable
            write(path, editable)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def set_endpoint(path: Path, cluster: str, endpoint: Endpoint) -> None:
    """Add ``endpoint`` to ``cluster``, or replace the one at its address:port."""
    with edit(path) as clusters:
        rest = [e for e in clusters.get(cluster, []) if e.key != endpoint.key]
        clusters[cluster] = [*rest, endpoint]


def set_health(path: Path, cluster: str, address: str, port: int, health: Health) -> Endpoint:
    """Change one endpoint's health (DRAINING before a scale-down); KeyError if it is absent."""
    with edit(path) as clusters:
        for i, e in enumerate(clusters.get(cluster, [])):
            if e.key == (address, port):
                updated = Endpoint(e.address, e.port, health, e.weight, e.zone, e.name)
                clusters[cluster][i] = updated
                return updated
    raise KeyError(f"{cluster}: no endpoint {address}:{port} in {path}")


def remove_endpoint(path: Path, cluster: str, address: str, port: int) -> bool:
    """Remove one endpoint; True if it was there. The cluster stays, possibly empty."""
    with edit(path) as clusters:
        before = clusters.get(cluster, [])
        clusters[cluster] = [e for e in before if e.key != (address, port)]
        return len(clusters[cluster]) != len(before)
