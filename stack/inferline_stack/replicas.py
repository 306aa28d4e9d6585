"""The stack's replicas: start a process and wait until it is ready; add a replica to Envoy or
drain it out; ``scale`` (``make scale``) a service to a number of them.

Adding: start, wait for the replica's own readiness (KServe ServerReady/ModelReady on its
direct port), then announce it (HEALTHY in the endpoints file; control/eds pushes it) and wait
until Envoy routes to it. Draining: DRAINING in the file, wait until Envoy has nothing in
flight to it, stop the process, remove it from the file (:mod:`inferline_stack.scaling`, the
protocol the test harness's pools share). As a Deployment's pods, the replicas of one step
start together (the lowest free indices) and drain together (the highest); replicas whose
process died are removed from the endpoints file first. One ``scale`` (or ``up``) at a time
per run directory.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from pathlib import Path

from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin
from inferline_stack import envoy as stack_envoy
from inferline_stack import health, leftovers, prometheus, scaling, services
from inferline_stack.config import MAX_REPLICAS, REPLICA_STEP, StackConfig
from inferline_stack.health import wait_until
from inferline_stack.lock import scale_lock
from inferline_stack.processes import ProcessTable
from inferline_stack.services import ENVOY, HOST, Service, endpoints_path, replica_name
from inferline_stack.ui import console, plain

ROUTABLE_TIMEOUT_S = 15.0  # announce -> Envoy routes to it: a health check or two
DRAIN_TIMEOUT_S = 30.0  # DRAINING -> nothing in flight: the longest request in progress


class StackError(Exception):
    """A step of up or scale failed; ``log`` is what the user needs to see to act on it."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


def start_ready(config: StackConfig, table: ProcessTable, service: Service) -> float:
    """Start ``service`` (stopping a stale one first); seconds until it answered ready."""
    started = start(config, table, service)
    with console.status(f"starting {service.name} …"):
        return wait_ready(config, table, service, started)


def start(config: StackConfig, table: ProcessTable, service: Service) -> float:
    """Start ``service`` (stopping a stale one first), not waiting; when it started."""
    table.stop(service.name, config.stop_grace_s)
    leftovers.remove_workspace(table.run_dir, service.name)  # what a kill -9 left of the last
    started = time.monotonic()
    table.start(service.name, service.argv, service.env, service.fingerprint())
    return started


def wait_ready(config: StackConfig, table: ProcessTable, service: Service, started: float) -> float:
    """Seconds from ``started`` until ``service`` answered ready; if it does not within the
    start timeout (or exits), it is stopped and a StackError shows its log's last lines."""
    timeout = config.start_timeout_s - (time.monotonic() - started)
    ok = wait_until(service.check, timeout, functools.partial(table.running, service.name))
    took = time.monotonic() - started
    if not ok:
        why = "is not ready" if table.running(service.name) else "exited"
        log = table.log_tail(service.name)
        table.stop(service.name, config.stop_grace_s)
        raise StackError(
            f"{service.name} {why} after {took:.0f}s; last lines of "
            f"{table.log_file(service.name)}:",
            log,
        )
    return took


def add(config: StackConfig, table: ProcessTable, replicas: Sequence[Service]) -> None:
    """Start every replica at once, as a Deployment's new pods start; then, in order, wait
    until each is ready, announce it and wait until Envoy routes to it (``up`` passes the
    tiers upstream first: a later one reaches an earlier one through Envoy). One that fails
    is stopped with those not announced yet, and the StackError says why."""
    started = [start(config, table, replica) for replica in replicas]
    names = ", ".join(r.name for r in replicas)
    for index, (replica, since) in enumerate(zip(replicas, started, strict=True)):
        try:
            with console.status(f"starting {names} …"):
                took = wait_ready(config, table, replica, since)
                routed = _announce(config, table, replica)
        except StackError:
            table.stop_all([r.name for r in replicas[index + 1 :]], config.stop_grace_s)
            raise
        track(config, table)
        console.print(
            f"[green]✓[/] {replica.name} ready at {replica.address} ({took:.1f}s); "
            f"Envoy routes to it after {routed:.2f}s"
        )


def _announce(config: StackConfig, table: ProcessTable, replica: Service) -> float:
    """HEALTHY in the endpoints file; seconds until Envoy routes to it. If Envoy does not,
    take it out again and stop it."""
    path, members = endpoints_path(config), replica.members()
    try:
        return (
            asyncio.run(scaling.announce(path, members, config.admin_url, ROUTABLE_TIMEOUT_S))
            or 0.0
        )
    except (TimeoutError, envoy_admin.AdminError) as exc:
        for cluster, endpoint in members:
            endpoints_file.remove_endpoint(path, cluster, HOST, endpoint.port)
        table.stop(replica.name, config.stop_grace_s)
        raise StackError(f"Envoy does not route to {replica.name}: {exc}") from None


def in_endpoints_file(config: StackConfig, service: Service) -> bool:
    try:
        clusters = endpoints_file.load(endpoints_path(config))
    except (OSError, endpoints_file.EndpointsFileError):
        return False
    return any(e.key == (HOST, service.port) for e in clusters.get(service.cluster, ()))


def drain(config: StackConfig, table: ProcessTable, replicas: Sequence[Service]) -> None:
    """Drain replicas together, as a Deployment's pods terminate: DRAINING, wait until Envoy
    has nothing in flight to any of them, stop them (at once), remove them."""
    start = time.monotonic()
    stopping: list[float] = []
    listed = [r for r in replicas if in_endpoints_file(config, r)]
    for replica in replicas:  # no endpoints file, or not in it: just stop
        if replica not in listed:
            table.stop(replica.name, config.stop_grace_s)
            console.print(f"stopped {replica.name} (it was not in {endpoints_path(config)})")
    if not listed:
        track(config, table)
        return

    def stop() -> None:
        stopping.append(time.monotonic())
        table.stop_all([r.name for r in listed], config.stop_grace_s)

    names = ", ".join(r.name for r in listed)
    members = [member for replica in listed for member in replica.members()]
    with console.status(f"draining {names} …"):
        drained = asyncio.run(
            scaling.drain(endpoints_path(config), members, config.admin_url, stop, DRAIN_TIMEOUT_S)
        )
    track(config, table)
    took, drained_after = time.monotonic() - start, stopping[0] - start
    if drained:
        console.print(
            f"[green]✓[/] {names} drained: nothing in flight in Envoy after "
            f"{drained_after:.2f}s; stopped and removed after {took:.1f}s"
        )
    else:
        console.print(
            f"[yellow]![/] {names}: Envoy did not confirm the drain within "
            f"{DRAIN_TIMEOUT_S:g}s; stopped (graceful) and removed all the same"
        )


def running_services(config: StackConfig, table: ProcessTable) -> list[Service]:
    """Every process of the stack that runs now: eds, Envoy, Prometheus, each replica."""
    listed = [
        s for s in (services.eds(config), stack_envoy.service(config)) if table.running(s.name)
    ]
    if table.running(prometheus.PROMETHEUS):
        listed.append(prometheus.service(config))
    for service in config.services:
        indices = running_replicas(table, service)
        listed += [services.replica(config, service, i) for i in indices]
    return listed


def track(config: StackConfig, table: ProcessTable) -> None:
    """Prometheus's targets: what runs now (a no-op for Prometheus when it is off)."""
    if config.prometheus:
        prometheus.sync_targets(config, running_services(config, table))


def running_replicas(table: ProcessTable, service: str) -> list[int]:
    """Indices of the replicas of ``service`` whose process runs."""
    return [i for i in range(MAX_REPLICAS) if table.running(replica_name(service, i))]


def forget_dead(config: StackConfig, table: ProcessTable, service: str) -> list[str]:
    """Remove replicas of ``service`` whose process is gone (killed, crashed) from the
    endpoints file and the process table; their names."""
    path = endpoints_path(config)
    try:
        listed = endpoints_file.load(path).get(service, ())
    except (OSError, endpoints_file.EndpointsFileError):
        listed = ()
    gone = []
    for endpoint in listed:
        name = endpoint.name
        if name and not table.running(name):
            endpoints_file.remove_endpoint(path, service, endpoint.address, endpoint.port)
            gone.append(name)
    if gone:
        forget(table, gone)
        track(config, table)
    return gone


def forget(table: ProcessTable, names: Sequence[str]) -> None:
    """Forget processes that are gone, and free what a ``kill -9`` left of them: their
    workspaces, and shared memory nobody uses any more (:mod:`inferline_stack.leftovers`: a
    scan of every process, so once for all of them)."""
    table.stop_all(names)  # not running: just removes their pid files
    for name in names:
        leftovers.remove_workspace(table.run_dir, name)
    leftovers.free_orphans()


def scale(config: StackConfig, table: ProcessTable, service: str, replicas: int) -> int:
    """Bring ``service`` to ``replicas`` running replicas: 0 done, 1 failed, 2 bad request."""
    if service not in config.services:
        console.print(
            f"[red]no service {service!r} in this stack[/]; one of {', '.join(config.services)}"
        )
        return 2
    if not 1 <= replicas <= MAX_REPLICAS:
        console.print(
            f"[red]{service}: between 1 and {MAX_REPLICAS} replicas locally[/] (replica i "
            f"listens on its base ports + {REPLICA_STEP[service]}·i)"
        )
        return 2
    try:
        config.replica_ports(service, replicas - 1)
    except ValueError as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    try:
        with scale_lock(Path(config.run_dir)):
            _scale(config, table, service, replicas)
    except StackError as exc:
        console.print(f"[red]✗ {exc}[/]")
        if exc.log:
            plain(exc.log)
        return 1
    return 0


def _scale(config: StackConfig, table: ProcessTable, service: str, replicas: int) -> None:
    if not (table.running(ENVOY) and health.envoy_ready(config.admin_url)):
        raise StackError(f"the stack is not up (no Envoy at {config.admin_url}): 'make up' first")
    for name in forget_dead(config, table, service):
        console.print(f"[yellow]![/] {name} was not running: removed from the endpoints file")
    running = running_replicas(table, service)
    before = len(running)
    free = sorted(set(range(MAX_REPLICAS)) - set(running))
    add(
        config,
        table,
        [services.replica(config, service, i) for i in free[: max(0, replicas - before)]],
    )
    drain(config, table, [services.replica(config, service, i) for i in running[replicas:]][::-1])
    running = running_replicas(table, service)
    console.print(f"{service}: {before} → {len(running)} replicas")
