"""``scale``: start or drain replicas of one service; control/eds pushes the change to Envoy.

Up, lowest free index first: start, wait until ready, announce (HEALTHY in the endpoints
file), report how long until Envoy routed to it. Down, highest index first: DRAINING, wait
until Envoy has nothing in flight to it, stop, remove. Replicas whose process died are
removed from the endpoints file first. One ``scale`` (or ``up``) at a time per run directory.
"""

from __future__ import annotations

from pathlib import Path

from inferline_stack import health, services
from inferline_stack.config import MAX_REPLICAS, REPLICA_STEP, StackConfig
from inferline_stack.lock import scale_lock
from inferline_stack.processes import ProcessTable
from inferline_stack.replicas import StackError, add, drain, forget_dead, running_replicas
from inferline_stack.services import ENVOY
from inferline_stack.ui import console, plain


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
    while len(running) < replicas:
        index = min(set(range(MAX_REPLICAS)) - set(running))
        add(config, table, services.replica(config, service, index))
        running = sorted([*running, index])
    while len(running) > replicas:
        index = running.pop()
        drain(config, table, services.replica(config, service, index))
    console.print(f"{service}: {before} → {len(running)} replicas")
