"""``python -m bench.batcher``: start the processes, run the parts, write the result."""

from __future__ import annotations

import asyncio
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.batcher.balance import part_balance
from bench.batcher.balance import replicas as balance_replicas
from bench.batcher.latency import part_latency
from bench.batcher.params import Params, parse_args
from bench.batcher.processes import Fleet, Replica
from bench.batcher.report import console, goals, print_tables
from bench.batcher.scale_out import part_scale_out
from bench.batcher.throughput import part_throughput
from bench.benchlib import run_main, write_result


async def run(params: Params, parts: set[str], fleet: Fleet) -> dict[str, Any]:
    """Start what ``parts`` need (all of it stopped by the caller), then run them in order."""
    result: dict[str, Any] = {}
    s = params.time_scale
    with console.status("starting the simulated replicas, Envoy, the control plane, batchers …"):
        single = None
        if parts & {"throughput", "latency"}:
            single = await fleet.replica("replica-single", params, 1.0, None)
        dyn: list[Replica] = []
        plain: list[Replica] = []
        if "scale-out" in parts:
            delay_us = round(params.max_queue_delay_ms * s * 1000)
            for i in range(max(params.replicas)):
                dyn.append(await fleet.replica(f"replica-dyn-{i}", params, s, delay_us))
                plain.append(await fleet.replica(f"replica-plain-{i}", params, s, None))
        unequal: tuple[Replica, Replica] | None = None
        if "balance" in parts:
            unequal = await balance_replicas(params, fleet)
        await fleet.ready([*([single] if single else []), *dyn, *plain, *(unequal or ())])
        triton_only: dict[int, tuple[str, list[Replica]]] = {}
        batched: dict[int, tuple[str, list[Replica]]] = {}
        if "scale-out" in parts:
            clusters = {f"dyn{n}": dyn[:n] for n in params.replicas}
            clusters |= {f"plain{n}": plain[:n] for n in params.replicas}
            listeners = await fleet.behind_envoy(clusters)
            delay_ms = params.max_queue_delay_ms * s
            for n in params.replicas:
                # Triton's own batching: Envoy in front of replicas that batch themselves;
                # the batcher's: the batcher in front of Envoy, replicas that do not batch.
                triton_only[n] = (listeners[f"dyn{n}"], dyn[:n])
                batcher = await fleet.batcher(f"batcher-n{n}", listeners[f"plain{n}"], delay_ms, n)
                batched[n] = (batcher, plain[:n])
        throughput_batcher = latency_batcher = forwarder = ""
        if single is not None:
            throughput_batcher = await fleet.batcher(
                "batcher-throughput", single.url, params.max_queue_delay_ms, 2
            )
            latency_batcher = await fleet.batcher("batcher-latency", single.url, 0.0, 2)
            forwarder = await fleet.forwarder("forwarder", single.url)
    console.print(f"[green]✓[/] processes ready (logs in {fleet.run_dir / 'logs'})")

    if "throughput" in parts and single is not None:
        console.print("[bold]1. throughput[/] (closed loop, one simulated replica)")
        result["throughput"] = await part_throughput(
            params, single.url, throughput_batcher, fleet.batcher_metrics(throughput_batcher)
        )
    if "scale-out" in parts:
        console.print(f"[bold]2. scale-out[/] (open-loop Poisson, clock x{s:g})")
        result["scale_out"] = await part_scale_out(params, triton_only, batched)
    if "latency" in parts and single is not None:
        console.print("[bold]3. added latency[/] (concurrency 1, max_queue_delay 0)")
        result["added_latency"] = await part_latency(
            params, single.url, forwarder, latency_batcher, fleet.batcher_metrics(latency_batcher)
        )
    if "balance" in parts and unequal is not None:
        console.print("[bold]4. two GPUs of unequal speed[/] (the batch hop: Envoy, proxyless)")
        result["balance"] = await part_balance(params, fleet, *unequal)
    return result


async def run_and_stop(params: Params, parts: set[str], run_dir: Path) -> dict[str, Any]:
    fleet = Fleet(run_dir)
    try:
        return await run(params, parts, fleet)
    finally:
        await fleet.close()


def main(argv: Sequence[str] | None = None) -> None:
    params, parts, keep_logs = parse_args(argv)
    run_dir = Path(tempfile.mkdtemp(prefix="inferline-bench-batcher-"))
    result: dict[str, Any] = {
        "simulated": True,
        "note": "every backend is the SIMULATED GPU (sleeps t0 + k*b), served by the real "
        "Triton server through PyTriton; part 2 runs on a clock slowed by time_scale, behind "
        "the real Envoy (the one template) fed by the real control plane",
        "params": asdict(params),
    }
    result |= asyncio.run(run_and_stop(params, parts, run_dir))
    result["goals"] = goals(result, params)
    result["machine"] = {
        "cpus": os.cpu_count(),
        "arch": platform.machine(),
        "python": platform.python_version(),
    }
    print_tables(result, params)
    console.print(f"wrote {write_result('batcher', result)}")
    if not keep_logs:
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_main(lambda: main(sys.argv[1:])))
