"""Announce and drain one endpoint: what ``make scale`` does around starting or stopping it.

Scaling up: start the process, wait for its own readiness, then :func:`announce` it (written
HEALTHY to the endpoints file; optionally wait until Envoy routes to it). Scaling down:
:func:`drain` marks it DRAINING, waits until Envoy has applied that and has no request in
flight to it, calls ``stop`` (the process then stops gracefully), and removes it from the
file. No request is lost: Envoy sends nothing new to a draining endpoint and everything it
had sent has finished before the process is told to stop.

The one implementation: the local stack (``up``, ``make scale``: :mod:`inferline_stack.replicas`)
and the test harness's pools (:class:`inferline_testing.harness.Pool`) both call these.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from eds.cache import Endpoint, Health
from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin

logger = logging.getLogger(__name__)

Stop = Callable[[], Awaitable[object] | object]
# What one replica is to Envoy: an endpoint in each cluster it serves (middleman: gRPC and REST).
Member = tuple[str, Endpoint]  # (cluster, endpoint)


async def announce(
    path: Path, members: Sequence[Member], admin: str = "", timeout_s: float = 10.0
) -> float | None:
    """Write every endpoint HEALTHY; with ``admin``, wait until Envoy routes to all of them and
    return how long that took (seconds)."""
    for cluster, endpoint in members:
        endpoints_file.set_endpoint(path, cluster, endpoint)
    if not admin:
        return None
    start = time.monotonic()
    for cluster, endpoint in members:
        await envoy_admin.wait_routable(admin, cluster, endpoint.address, endpoint.port, timeout_s)
    return time.monotonic() - start


async def drain(
    path: Path, members: Sequence[Member], admin: str, stop: Stop, timeout_s: float = 30.0
) -> bool:
    """DRAINING, wait for Envoy to finish with every endpoint, ``stop()``, remove them.

    Returns False if Envoy did not confirm the drain within ``timeout_s`` (a request still in
    flight, or no Envoy): the endpoints are stopped and removed anyway, and the process's own
    graceful stop gives what is left its grace period.
    """
    for cluster, endpoint in members:
        endpoints_file.set_health(path, cluster, endpoint.address, endpoint.port, Health.DRAINING)
    drained = True
    try:
        for cluster, endpoint in members:
            await envoy_admin.wait_drained(
                admin, cluster, endpoint.address, endpoint.port, timeout_s
            )
    except (TimeoutError, envoy_admin.AdminError) as exc:
        drained = False
        names = ", ".join(f"{c} {e.address}:{e.port}" for c, e in members)
        logger.warning("%s: drain not confirmed by Envoy (%s)", names, exc)
    result = stop()
    if inspect.isawaitable(result):
        await result
    for cluster, endpoint in members:
        endpoints_file.remove_endpoint(path, cluster, endpoint.address, endpoint.port)
    return drained
