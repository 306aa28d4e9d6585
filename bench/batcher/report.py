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
            "in the batcher ms: arrival to send / upstream",
        ):
            table.add_column(column, justify="right")
        for p in result["throughput"]["points"]:
            nb, b, inside = p["no_batching"], p["batcher"], p["batcher_inside_ms"]
            table.add_row(
                str(p["concurrency"]),
                f"{nb['images_per_s']:.1f}",
                f"{b['images_per_s']:.1f}",
                f"{p['gain']:.2f}x",
                f"{nb['p99_ms']:.1f} / {b['p99_ms']:.1f}",
                f"{inside['queue']:.2f} / {inside['upstream']:.2f}",
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
            f"direct, {a['forwarder_p50_ms']:.2f} ms through a bare forwarder, "
            f"{a['batcher_p50_ms']:.2f} ms through the batcher: [bold]added_p50_ms = "
            f"{a['added_p50_ms']:.3f}[/], of which any Python hop "
            f"{a['forwarder_added_p50_ms']:.3f} and the batcher's own {a['own_p50_ms']:.3f}; "
            f"inside its handler (mean) {a['batcher_handler_mean_ms']:.3f} ms: arrival to send "
            f"{a['batcher_arrival_to_send_mean_ms']:.3f}, the upstream call "
            f"{a['batcher_upstream_mean_ms']:.3f}"
        )
    if "balance" in result:
        b = result["balance"]
        table = Table(
            title=f"SIMULATED GPU: the batch hop over two GPUs, one {b['slower']:g}x slower "
            f"(closed loop of {b['concurrency']})"
        )
        for column in ("dialled", "images/s", "p50 ms", "p99 ms", "share to the faster"):
            table.add_column(column, justify="right")
        for name in ("envoy_least_request", "proxyless_round_robin"):
            p = b[name]
            table.add_row(
                name.replace("_", " "), f"{p['images_per_s']:.1f}", f"{p['p50_ms']:.1f}",
                f"{p['p99_ms']:.1f}", f"{p['share_to_the_faster']:.2f}",
            )  # fmt: skip
        console.print(table)
    table = Table(title="goals")
    table.add_column("goal")
    table.add_column("met", justify="center")
    for goal, met in result["goals"].items():
        table.add_row(goal, "-" if met is None else ("[green]yes[/]" if met else "[red]no[/]"))
    console.print(table)
    for line in why(result, params):
        console.print(f"[red]why:[/] {line}")


def why(result: dict[str, Any], params: Params) -> list[str]:
    """For each goal not met, what the run measured that says why."""
    lines = []
    goals_met = result.get("goals", {})
    if goals_met.get("added_p50_ms <= 1") is False:
        a = result["added_latency"]
        lines.append(
            f"the batcher added {a['added_p50_ms']:.3f} ms at p50; a bare grpc.aio forwarder adds "
            f"{a['forwarder_added_p50_ms']:.3f} ms on this machine (a hop's own RPC in and out), "
            f"so the batcher's own is {a['own_p50_ms']:.3f} ms, "
            f"{a['batcher_arrival_to_send_mean_ms']:.3f} of it between arrival and send (mean)"
        )
    if goals_met.get("gain_at_64 >= 4") is False:
        gain = result["throughput"]["gain_at_64"]
        lines.append(
            f"at concurrency 64 the batcher gave {gain}x; each batch is t0 {params.t0_ms} + "
            f"k {params.k_ms}·b ms, so full batches of {params.max_batch} should give more: "
            "look at its mean batch and what the machine's cores did during the run"
        )
    if goals_met.get("batcher at least as good at every point") is False:
        for point in result["scale_out"]["points"]:
            if not point["ok"]:
                lines.append(
                    f"N={point['replicas']}, load {point['load']:g}: batcher/triton-only ratios "
                    f"{point['ratios']} outside the tolerance {params.tolerance:g}"
                )
    if goals_met.get("no errors") is False:
        lines.append("requests failed during scale-out: the processes' logs say why (--keep-logs)")
    return lines
