"""One cluster's endpoints and their request counters, from Envoy's admin ``/clusters``.

The demo client is a deployable of its own and imports no project code, so this is a few lines
of its own rather than ``inferline_envoy.admin``; it reads the same ``/clusters?format=json``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp

from demo_client.web_state import HostCounters, WebState

logger = logging.getLogger(__name__)

DEFAULT_ADMIN = "http://127.0.0.1:9901"
DEFAULT_CLUSTER = "triton"
POLL_S = 0.5
TIMEOUT_S = 2.0
# Health flags under which Envoy sends a host no new request (as inferline_envoy.admin has it).
FAILING_FLAGS = frozenset(
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


class EnvoyAdminError(Exception):
    """Envoy's admin did not answer with the cluster."""


def _state(health: Mapping[str, Any]) -> str:
    eds = str(health.get("eds_health_status", "UNKNOWN"))
    if eds == "DRAINING":
        return "draining"
    failing = sorted(k for k, v in health.items() if v is True and k in FAILING_FLAGS)
    if eds in ("HEALTHY", "UNKNOWN") and not failing:
        return "healthy"
    return ",".join(failing) or eds.lower()


def parse_hosts(data: Mapping[str, Any], cluster: str) -> list[HostCounters] | None:
    """The hosts of ``cluster`` in ``/clusters?format=json``; ``None`` when it has no such
    cluster."""
    for status in data.get("cluster_statuses") or []:
        if status.get("name") != cluster:
            continue
        hosts = []
        for host in status.get("host_statuses") or []:
            socket = (host.get("address") or {}).get("socket_address") or {}
            stats = {s.get("name"): int(s.get("value", 0)) for s in host.get("stats") or []}
            hosts.append(
                HostCounters(
                    address=f"{socket.get('address', '')}:{int(socket.get('port_value', 0))}",
                    rq_total=stats.get("rq_total", 0),
                    state=_state(host.get("health_status") or {}),
                    hostname=str(host.get("hostname", "")),
                )
            )
        return hosts
    return None


async def fetch_hosts(
    session: aiohttp.ClientSession, admin: str, cluster: str
) -> list[HostCounters]:
    """``cluster``'s hosts now; :class:`EnvoyAdminError` saying why not."""
    url = admin.rstrip("/") + "/clusters?format=json"
    try:
        async with session.get(url) as response:
            body = await response.text()
            if response.status != 200:
                raise EnvoyAdminError(f"Envoy admin {admin} answered {response.status}")
        data = json.loads(body)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        reason = str(exc) or type(exc).__name__
        raise EnvoyAdminError(f"Envoy admin {admin} is not answering ({reason})") from exc
    except ValueError as exc:
        raise EnvoyAdminError(f"Envoy admin {admin} answered no JSON: {exc}") from exc
    hosts = parse_hosts(data, cluster)
    if hosts is None:
        raise EnvoyAdminError(f"Envoy admin {admin} has no cluster {cluster!r}")
    return hosts


async def poll(
    dashboard: WebState,
    admin: str,
    cluster: str,
    every_s: float = POLL_S,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Feed ``dashboard`` a sample of ``cluster``'s hosts every ``every_s`` until cancelled."""
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_S)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            try:
                hosts = await fetch_hosts(session, admin, cluster)
            except EnvoyAdminError as exc:
                if dashboard.replicas_note != str(exc):
                    logger.info("per-replica lines unavailable: %s", exc)
                dashboard.envoy_unavailable(str(exc))
            else:
                dashboard.envoy(clock(), hosts)
            await asyncio.sleep(every_s)
