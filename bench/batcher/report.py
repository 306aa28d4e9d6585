"""What the run met, and the tables it prints."""

from __future__ import annotations

import shutil
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.batcher.params import Params

# Wide enough for the scale-out table when the output is a file or a pipe.
console = Console(width=max(shutil.get_terminal_size((120, 24)).columns, 120))


def goals(result: dict[str, Any], params: Params) -> dict[str, bool | None]:
    out: dict[str, bool | None] = {}
    if "throughput" in result:
        gain = result["throughput"]["gain_at_64"]
        out["gain_at_64 >= 4"] = None if gain is None else gain >= 4
    if "scale_out" in result:
        points = result["scale_out"]["points"]
        out["batcher at least as good at every point"] = all(p["ok"] for p in points)
        low = [p for p in points if p["replicas"] == 4 and p["load"] == 0.125]
        if low:
            out["N=4, 1/8 load: mean batch >= 1.3x"] = low[0]["ratios"]["batch"] >= 1.3
            out["N=4, 1/8 load: p99 <= 0.8x"] = low[0]["ratios"]["p99"] <= 0.8
        out["no errors"] = not any(
            p[a]["errors"] for p in points for a in ("triton_only", "batcher")
        )
    if "added_latency" in result:
        out["added_p50_ms <= 1"] = result["added_latency"]["added_p50_ms"] <= 1.0
    return out


def print_tables(result: dict[str, Any], params: Params) -> None:
    if "throughput" in result:
        table = Table(
            title=f"SIMULATED GPU: throughput, one replica (t0 {params.t0_ms} ms, "
            f"k {params.k_ms} ms, max_batch {params.max_batch})"
        )
        for column in (
            "concurrency",
            "no batching img/s",
            "batcher img/s",
            "gain",
            "p99 ms (no / batcher)",
        ):
            table.add_column(column, justify="right")
        for p in result["throughput"]["points"]:
            nb, b = p["no_batching"], p["batcher"]
            table.add_row(
                str(p["concurrency"]),
                f"{nb['images_per_s']:.1f}",
                f"{b['images_per_s']:.1f}",
                f"{p['gain']:.2f}x",
                f"{nb['p99_ms']:.1f} / {b['p99_ms']:.1f}",
            )
        console.print(table)
    if "scale_out" in result:
        s = params.time_scale
        table = Table(
            title=(
                f"SIMULATED GPU: scale-out behind Envoy, triton-only -> batcher (clock x{s:g}: t0 "
                f"{params.t0_ms * s:g} ms, k {params.k_ms * s:g} ms, max_queue_delay "
                f"{params.max_queue_delay_ms * s:g} ms, max_batch {params.max_batch})"
            )
        )
        table.caption = "T: Triton's dynamic batcher at each replica; B: the batcher before Envoy"
        table.add_column("N", justify="right")
        table.add_column("load", justify="right")
        table.add_column("req/s", justify="right")
        for group in ("batch", "p99 ms", "img/busy-s"):
            table.add_column(f"{group} T", justify="right")
            table.add_column("B", justify="right")
            table.add_column("B/T" if group == "img/busy-s" else "B/T (model)", justify="right")
        table.add_column("ok", justify="center")
        for p in result["scale_out"]["points"]:
            t, b, r, m = p["triton_only"], p["batcher"], p["ratios"], p["predicted"]
            table.add_row(
                str(p["replicas"]),
                f"{p['load']:g}",
                f"{p['rate_per_s']:.0f}",
                f"{t['mean_batch']:.1f}",
                f"{b['mean_batch']:.1f}",
                f"{r['batch']:.2f} ({m['batch_ratio']:.2f})",
                f"{t['p99_ms']:.0f}",
                f"{b['p99_ms']:.0f}",
                f"{r['p99']:.2f} ({m['p99_ratio']:.2f})",
                f"{t['images_per_busy_backend_s']:.0f}",
                f"{b['images_per_busy_backend_s']:.0f}",
                f"{r['images_per_busy_s']:.2f}",
                "[green]yes[/]" if p["ok"] else "[red]no[/]",
            )
        console.print(table)
    if "added_latency" in result:
        a = result["added_latency"]
        console.print(
            f"added latency at concurrency 1, max_queue_delay 0: p50 {a['direct_p50_ms']:.2f} ms "
            f"direct, {a['batcher_p50_ms']:.2f} ms through the batcher: "
            f"[bold]added_p50_ms = {a['added_p50_ms']:.3f}[/] (median of paired differences "
            f"{a['added_median_of_pairs_ms']:.3f} ms)"
        )
    table = Table(title="goals")
    table.add_column("goal")
    table.add_column("met", justify="center")
    for goal, met in result["goals"].items():
        table.add_row(goal, "-" if met is None else ("[green]yes[/]" if met else "[red]no[/]"))
    console.print(table)
