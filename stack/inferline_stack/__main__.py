"""python -m inferline_stack up|down|status: the local stack as background processes."""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from inferline.config import ConfigError, load
from inferline_stack.config import PREFIX, StackConfig
from inferline_stack.health import ready, wait_ready
from inferline_stack.processes import ProcessTable
from inferline_stack.services import services

console = Console(stderr=True)


def up(config: StackConfig, table: ProcessTable) -> int:
    for service in services(config):
        if table.pid(service.name) is not None and ready(service.address, service.model):
            console.print(f"[green]✓[/] {service.name} already running at {service.address}")
            continue
        table.stop(service.name, config.stop_grace_s)  # a stale or unhealthy one
        start = time.monotonic()
        pid = table.start(service.name, service.argv, service.env)
        with console.status(f"starting {service.name} (pid {pid}) …"):
            ok = wait_ready(
                service.address,
                service.model,
                config.start_timeout_s,
                functools.partial(table.running, service.name),
            )
        if not ok:
            running = table.pid(service.name) is not None
            why = "is not ready" if running else "exited"
            console.print(
                f"[red]✗ {service.name} {why} after {time.monotonic() - start:.0f}s[/]; "
                f"last lines of {table.log_file(service.name)}:"
            )
            console.print(table.log_tail(service.name), markup=False, highlight=False)
            down(config, table)
            return 1
        took = time.monotonic() - start
        console.print(f"[green]✓[/] {service.name} ready at {service.address} ({took:.1f}s)")
    console.print(f"stack up: public endpoint localhost:{config.public_port}")
    return 0


def down(config: StackConfig, table: ProcessTable) -> int:
    for name in reversed([s.name for s in services(config)] + table.names()):
        if table.stop(name, config.stop_grace_s):
            console.print(f"stopped {name}")
    return 0


def status(config: StackConfig, table: ProcessTable) -> int:
    out = Table(title="inferline local stack")
    for column in ("service", "pid", "address", "ready", "metrics", "log"):
        out.add_column(column)
    healthy = True
    for service in services(config):
        pid = table.pid(service.name)
        is_ready = pid is not None and ready(service.address, service.model)
        healthy &= is_ready
        out.add_row(
            service.name,
            str(pid) if pid else "-",
            service.address,
            "[green]ready[/]" if is_ready else ("[yellow]not ready[/]" if pid else "[red]down[/]"),
            service.metrics,
            str(table.log_file(service.name)),
        )
    Console().print(out)
    return 0 if healthy else 3


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m inferline_stack", description=__doc__)
    parser.add_argument("command", choices=["up", "down", "status"])
    args, rest = parser.parse_known_args()
    try:
        config = load(StackConfig, PREFIX, rest)
    except ConfigError as error:
        console.print(f"[red]{error}[/]")
        return 2
    table = ProcessTable(Path(config.run_dir))
    commands = {"up": up, "down": down, "status": status}
    return commands[args.command](config, table)


if __name__ == "__main__":
    sys.exit(main())
