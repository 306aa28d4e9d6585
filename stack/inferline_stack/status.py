"""``status``: every process of the stack (every replica), then each cluster as Envoy sees it."""

from __future__ import annotations

import asyncio
import sys

from rich.console import Console
from rich.table import Table

from inferline_envoy import admin as envoy_admin
from inferline_stack import envoy as stack_envoy
from inferline_stack import prometheus, services, traceview
from inferline_stack.config import StackConfig
from inferline_stack.processes import ProcessTable
from inferline_stack.replicas import running_replicas
from inferline_stack.services import Service


def processes(config: StackConfig, table: ProcessTable) -> list[Service]:
    """What should run: eds, Envoy, Prometheus (when wanted and installed), and each service's
    running replicas (at least replica 0)."""
    listed = [services.eds(config), stack_envoy.service(config)]
    if table.running(prometheus.PROMETHEUS) or (config.prometheus and prometheus.binary()):
        listed.append(prometheus.service(config))
    if table.running(traceview.MLFLOW) or traceview.runs_backend(config):
        listed.append(services.trace_view(config))
    for service in config.services:
        indices = running_replicas(table, service) or [0]
        listed += [services.replica(config, service, i) for i in indices]
    return listed


def status(config: StackConfig, table: ProcessTable) -> int:
    """Print both tables; 0 when every process is ready, else 3."""
    out = Console(width=None if sys.stdout.isatty() else 200)  # a pipe gets whole lines
    view = Table(title="inferline local stack")
    for column in ("process", "pid", "address", "ready", "metrics", "log"):
        view.add_column(column)
    healthy = True
    for service in processes(config, table):
        pid = table.pid(service.name)
        is_ready = pid is not None and service.check()
        healthy &= is_ready
        address = service.address
        if service.name == services.ENVOY:
            ports = ",".join(str(port) for _, port in config.listeners)
            address = f"127.0.0.1:{ports}"  # its admin: the metrics column
        view.add_row(
            service.name,
            str(pid) if pid else "-",
            address,
            "[green]ready[/]" if is_ready else ("[yellow]not ready[/]" if pid else "[red]down[/]"),
            service.metrics,
            str(table.log_file(service.name)),
        )
    out.print(view)
    if table.running(prometheus.PROMETHEUS):
        out.print(f"Prometheus: {config.prometheus_url}", markup=False, highlight=False)
    if table.running(traceview.MLFLOW):
        out.print(f"traces: {traceview.traces_url(config)}", markup=False, highlight=False)
    try:
        by_cluster = asyncio.run(envoy_admin.clusters(config.admin_url))
    except envoy_admin.AdminError as exc:
        out.print(f"Envoy's view: not available ({exc})", markup=False, highlight=False)
        return 3
    out.print(f"Envoy's view ({config.admin_url}/clusters):", markup=False, highlight=False)
    out.print(envoy_admin.format_table(by_cluster), markup=False, highlight=False, soft_wrap=True)
    return 0 if healthy else 3
