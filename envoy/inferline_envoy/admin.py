"""Envoy's admin API, as the local stack, the tests and the benchmarks need it.

* :func:`clusters`: every cluster's endpoints as Envoy sees them (EDS health, health-check
  and outlier flags, requests in flight) — ``make status`` prints it;
* :func:`wait_drained`: after an endpoint is marked DRAINING, wait until Envoy has applied
  that and has no request in flight to it — then its process can stop;
* :func:`wait_routable`: wait until Envoy would send new requests to an endpoint.

    python -m inferline_envoy.admin                      # table of every EDS cluster
    python -m inferline_envoy.admin --admin http://127.0.0.1:9901 --json
    python -m inferline_envoy.admin --drain       # a pod's preStop: out of service, nothing lost

Everything is async (aiohttp); a synchronous caller wraps one call in ``asyncio.run``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

DEFAULT_ADMIN = "http://127.0.0.1:9901"
POLL_S = 0.05
# Health flags that keep a host from getting new requests.
BLOCKING_FLAGS = frozenset(
    {
        "failed_active_health_check",
        "failed_outlier_check",
        "failed_eds_health",
        "pending_active_hc",
        "pending_dynamic_removal",
        "excluded_via_immediate_hc_fail",
        "active_hc_timeout",
    }
)


class AdminError(Exception):
    """Envoy's admin endpoint did not answer as expected."""


@dataclass(frozen=True)
class HostStatus:
    cluster: str
    address: str
    port: int
    hostname: str
    zone: str
    weight: int
    eds_health: str  # HEALTHY, DRAINING, UNHEALTHY, ... as the control plane sent it
    flags: tuple[str, ...]  # Envoy's own verdicts: failed_active_health_check, ...
    rq_active: int
    rq_pending: int
    rq_total: int
    cx_active: int

    @property
    def key(self) -> tuple[str, int]:
        return (self.address, self.port)

    @property
    def routable(self) -> bool:
        """Envoy would pick this host for a new request."""
        return self.eds_health in ("HEALTHY", "UNKNOWN") and not set(self.flags) & BLOCKING_FLAGS

    @property
    def in_flight(self) -> int:
        return self.rq_active + self.rq_pending

    @property
    def state(self) -> str:
        if self.eds_health == "DRAINING":
            return "draining"
        if self.routable:
            return "healthy"
        return ",".join(self.flags) or self.eds_health.lower()


def parse_clusters(data: Mapping[str, Any]) -> dict[str, list[HostStatus]]:
    """``/clusters?format=json`` as host statuses by cluster name."""
    out: dict[str, list[HostStatus]] = {}
    for cluster in data.get("cluster_statuses") or []:
        hosts = []
        for host in cluster.get("host_statuses") or []:
            socket = (host.get("address") or {}).get("socket_address") or {}
            stats = {s["name"]: int(s.get("value", 0)) for s in host.get("stats") or []}
            health = dict(host.get("health_status") or {})
            eds = str(health.pop("eds_health_status", "UNKNOWN"))
            hosts.append(
                HostStatus(
                    cluster=str(cluster.get("name", "")),
                    address=str(socket.get("address", "")),
                    port=int(socket.get("port_value", 0)),
                    hostname=str(host.get("hostname", "")),
                    zone=str((host.get("locality") or {}).get("zone", "")),
                    weight=int(host.get("weight", 1)),
                    eds_health=eds,
                    flags=tuple(sorted(k for k, v in health.items() if v is True)),
                    rq_active=stats.get("rq_active", 0),
                    rq_pending=stats.get("rq_pending_active", 0),
                    rq_total=stats.get("rq_total", 0),
                    cx_active=stats.get("cx_active", 0),
                )
            )
        out[str(cluster.get("name", ""))] = sorted(hosts, key=lambda h: h.key)
    return out


async def _request(method: str, admin: str, path: str, timeout_s: float) -> tuple[int, str]:
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
            session.request(method, admin.rstrip("/") + path) as response,
        ):
            return response.status, await response.text()
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        raise AdminError(f"Envoy admin {admin} is not answering: {exc}") from exc


async def _get(admin: str, path: str, timeout_s: float) -> tuple[int, str]:
    return await _request("GET", admin, path, timeout_s)


async def _post(admin: str, path: str, timeout_s: float = 2.0) -> None:
    status, body = await _request("POST", admin, path, timeout_s)
    if status != 200:
        raise AdminError(f"{admin}{path} answered {status}: {body[:200]}")


async def ready(admin: str = DEFAULT_ADMIN, timeout_s: float = 2.0) -> bool:
    """Envoy has initialised (its static EDS clusters got their first answer) and is LIVE."""
    try:
        status, _ = await _get(admin, "/ready", timeout_s)
    except AdminError:
        return False
    return status == 200


async def clusters(
    admin: str = DEFAULT_ADMIN, timeout_s: float = 2.0
) -> dict[str, list[HostStatus]]:
    status, body = await _get(admin, "/clusters?format=json", timeout_s)
    if status != 200:
        raise AdminError(f"{admin}/clusters answered {status}: {body[:200]}")
    return parse_clusters(json.loads(body))


async def stats(admin: str, pattern: str, timeout_s: float = 2.0) -> dict[str, int | str]:
    """Envoy's stats whose names match the regular expression ``pattern``."""
    status, body = await _get(admin, f"/stats?format=json&filter={pattern}", timeout_s)
    if status != 200:
        raise AdminError(f"{admin}/stats answered {status}: {body[:200]}")
    out: dict[str, int | str] = {}
    for item in json.loads(body).get("stats") or []:
        if "value" in item:
            out[item["name"]] = item["value"]
    return out


async def wait_ready(admin: str, timeout_s: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await ready(admin):
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"Envoy at {admin} is not ready after {timeout_s:g} s")
        await asyncio.sleep(POLL_S)


async def endpoint(admin: str, cluster: str, address: str, port: int) -> HostStatus | None:
    """Envoy's view of one endpoint of ``cluster`` (``None``: Envoy does not have it)."""
    hosts = (await clusters(admin)).get(cluster, [])
    return next((h for h in hosts if h.key == (address, port)), None)


async def wait_host(
    admin: str,
    cluster: str,
    address: str,
    port: int,
    condition: Callable[[HostStatus | None], bool],
    timeout_s: float,
    what: str = "the expected state",
) -> HostStatus | None:
    """Poll until ``condition(host)`` (``None``: Envoy does not have the host) holds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    host: HostStatus | None = None
    while True:
        try:
            host = await endpoint(admin, cluster, address, port)
            if condition(host):
                return host
        except AdminError:
            if loop.time() > deadline:
                raise
        if loop.time() > deadline:
            raise TimeoutError(
                f"{cluster} {address}:{port} did not reach {what} in {timeout_s:g} s; "
                f"last seen: {host}"
            )
        await asyncio.sleep(POLL_S)


async def wait_drained(
    admin: str, cluster: str, address: str, port: int, timeout_s: float = 30.0
) -> HostStatus | None:
    """Wait until Envoy has the endpoint as DRAINING (or gone) with nothing in flight to it."""

    def drained(host: HostStatus | None) -> bool:
        return host is None or (host.eds_health == "DRAINING" and host.in_flight == 0)

    return await wait_host(admin, cluster, address, port, drained, timeout_s, "drained")


async def wait_routable(
    admin: str, cluster: str, address: str, port: int, timeout_s: float = 10.0
) -> HostStatus | None:
    """Wait until Envoy would send new requests to the endpoint (health check passed)."""

    def routable(host: HostStatus | None) -> bool:
        return host is not None and host.routable

    return await wait_host(admin, cluster, address, port, routable, timeout_s, "routable")


async def wait_gone(
    admin: str, cluster: str, address: str, port: int, timeout_s: float = 10.0
) -> None:
    """Wait until Envoy no longer routes to the endpoint (removed, or failing its checks)."""

    def gone(host: HostStatus | None) -> bool:
        return host is None or not host.routable

    await wait_host(admin, cluster, address, port, gone, timeout_s, "not routable")


async def in_flight(admin: str) -> int:
    """Requests Envoy is serving on its listeners now (its admin and probe listeners aside)."""
    active = await stats(admin, r"^http\..*\.downstream_rq_active$")
    return sum(
        int(value)
        for name, value in active.items()
        if name not in ("http.admin.downstream_rq_active", "http.probe.downstream_rq_active")
    )


async def drain(admin: str, settle_s: float = 5.0, timeout_s: float = 30.0) -> int:
    """Take this Envoy out of service without failing a request (a pod's preStop hook).

    Fail its health (``/ready`` answers 503, so Kubernetes takes the pod out of the Service's
    endpoints), wait ``settle_s`` for that to reach the load balancers, drain the listeners
    (HTTP/2 clients get GOAWAY and reconnect elsewhere), then wait until no request is in
    flight. Returns the requests still in flight after ``timeout_s`` (0: drained).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    await _post(admin, "/healthcheck/fail")
    await asyncio.sleep(min(settle_s, timeout_s))  # the endpoint's removal propagating
    await _post(admin, "/drain_listeners?graceful")
    while True:
        left = await in_flight(admin)
        if not left or loop.time() >= deadline:
            return left
        await asyncio.sleep(POLL_S)


def format_table(by_cluster: Mapping[str, Sequence[HostStatus]]) -> str:
    """One line per endpoint, as ``make status`` shows it."""
    header = ("cluster", "endpoint", "name", "zone", "weight", "state", "in flight", "requests")
    rows = [header]
    for name in sorted(by_cluster):
        if name == "xds":
            continue
        hosts = by_cluster[name]
        if not hosts:
            rows.append((name, "(no endpoints)", "", "", "", "", "", ""))
        for h in hosts:
            rows.append(
                (
                    name,
                    f"{h.address}:{h.port}",
                    h.hostname,
                    h.zone,
                    str(h.weight),
                    h.state,
                    str(h.in_flight),
                    str(h.rq_total),
                )
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inferline_envoy.admin",
        description="Each cluster's endpoints as Envoy sees them; or drain this Envoy.",
    )
    parser.add_argument("--admin", default=DEFAULT_ADMIN, help=f"default {DEFAULT_ADMIN}")
    parser.add_argument("--json", action="store_true", help="JSON instead of a table")
    parser.add_argument(
        "--drain",
        action="store_true",
        help="fail readiness, drain the listeners, wait until nothing is in flight (preStop)",
    )
    parser.add_argument("--settle-s", type=float, default=5.0, help="--drain: after /ready fails")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="--drain: at most")
    args = parser.parse_args(argv)
    try:
        if args.drain:
            left = asyncio.run(drain(args.admin, args.settle_s, args.timeout_s))
            sys.stderr.write(f"drained: {left} request(s) still in flight\n")
            return 0 if left == 0 else 1
        by_cluster = asyncio.run(clusters(args.admin))
    except AdminError as exc:
        sys.stderr.write(f"{exc}\n")
        return 3
    if args.json:
        data = {n: [asdict(h) for h in hs] for n, hs in by_cluster.items() if n != "xds"}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        sys.stdout.write(format_table(by_cluster) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
