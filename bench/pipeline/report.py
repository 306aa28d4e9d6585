"""The tables: CPU ms per image by process for every scenario, and what a GPU needs in CPU."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.pipeline.measure import PROCESSES
from bench.pipeline.scenarios import DEFAULTS

console = Console(width=None if sys.stdout.isatty() else 200)  # a log: no wrapping


def print_table(results: Mapping[str, Any]) -> None:
    """One row per scenario (its key; the legend below says what each is), a column per
    process and per figure: readable in a log as well as a terminal."""
    table = Table(title="CPU ms per image, by process (utime + stime over the run)")
    table.add_column("scenario")
    figures = (
        ("total_cpu_ms_per_image", "total"),
        ("decoder_floor_ms_per_image", "decoder alone"),
        ("pipeline_overhead_ms_per_image", "overhead"),
        ("envoy_kib_per_image", "KiB via Envoy"),
        ("images_per_s", "images/s"),
    )
    for name in (*PROCESSES, *(label for _, label in figures)):
        table.add_column(name, justify="right")
    for key, r in results.items():
        table.add_row(
            key,
            *(f"{r['cpu_ms_per_image'][p]:.2f}" for p in PROCESSES),
            *(f"[bold]{r[field]}[/bold]" for field, _ in figures),
        )
    console.print(table)
    for key, r in results.items():
        console.print(f"  {key}: {r['title']}")


def print_per_core(results: Mapping[str, Any], compared: Mapping[str, float]) -> None:
    """For the default placement and dialling: cores per 1,000 images/s and images/s per core,
    and any other server's figure given beside them."""
    table = Table(title="what a GPU needs in CPU (the default: in-pod, proxyless to the batchers)")
    table.add_column("scenario")
    table.add_column("images/s per core", justify="right")
    table.add_column("cores per 1,000 images/s", justify="right")
    for key in DEFAULTS:
        if key in results:
            r = results[key]
            table.add_row(
                r["title"], str(r["images_per_s_per_core"]), str(r["cores_per_1000_images_per_s"])
            )
    for name, per_core in compared.items():
        table.add_row(f"{name} (given)", f"{per_core:g}", f"{1000 / per_core:.1f}")
    console.print(table)
