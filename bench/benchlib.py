"""Shared by the benchmarks: the local stack on free ports, the demo client, result files."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from inferline_stack.config import StackConfig
from inferline_stack.freeports import config_on_free_ports, free_port
from inferline_stack.processes import ProcessTable
from inferline_stack.stack import down, up

__all__ = ["RESULTS", "ROOT", "demo_client", "free_port", "local_stack", "write_result"]

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


@contextmanager
def local_stack(run_dir: Path, **overrides: Any) -> Iterator[StackConfig]:
    """The local stack on free ports (every hop through Envoy), stopped on exit.

    ``overrides``: any StackConfig field, e.g. ``batcher=False`` (middleman -> Envoy ->
    Triton), ``decode="inprocess"``, ``model="simulated_gpu"``.
    """
    config = config_on_free_ports(run_dir, **overrides)
    table = ProcessTable(run_dir)
    try:
        if up(config, table) != 0:
            raise SystemExit("the local stack did not start")
        yield config
    finally:
        down(config, table)


def demo_client(target: str, duration: float, concurrency: int, *extra: str) -> dict[str, Any]:
    """Run the demo client as its own process (as a user would) and return its JSON summary."""
    argv = [sys.executable, "-m", "demo_client", "--target", target, "--json"]
    argv += ["--duration", str(duration), "--concurrency", str(concurrency), *extra]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def write_result(name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
