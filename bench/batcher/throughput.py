"""Part 1: closed-loop throughput on one replica, the batcher in front vs no batching."""

from __future__ import annotations

import asyncio
from typing import Any

from bench.batcher.latency import histogram_means, histogram_sums
from bench.batcher.measure import closed_loop, summary
from bench.batcher.params import Params
from bench.batcher.report import console


async def part_throughput(
    params: Params, direct: str, batcher: str, batcher_metrics: str
) -> dict[str, Any]:
    """At each concurrency: straight to the replica, then through the batcher, with where a
    request's time went inside the batcher under that load (arrival to send, the upstream call:
    its own histograms)."""
    points = []
    for concurrency in params.concurrencies:
        row: dict[str, Any] = {"concurrency": concurrency}
        for name, url in (("no_batching", direct), ("batcher", batcher)):
            warmup_s = min(params.warmup_s, 2.0)
            before = await asyncio.to_thread(histogram_sums, batcher_metrics)
            recorder = await closed_loop(url, concurrency, params.throughput_s, warmup_s)
            row[name] = summary(recorder)
        row["batcher_inside_ms"] = histogram_means(
            before, await asyncio.to_thread(histogram_sums, batcher_metrics)
        )
        row["gain"] = round(
            row["batcher"]["images_per_s"] / max(row["no_batching"]["images_per_s"], 1e-9), 2
        )
        console.print(
            f"  concurrency {concurrency:3d}: no batching {row['no_batching']['images_per_s']:8.1f}"
            f" images/s, batcher {row['batcher']['images_per_s']:8.1f} images/s ({row['gain']}x)"
        )
        points.append(row)
    gain_64 = next((p["gain"] for p in points if p["concurrency"] == 64), None)
    return {"points": points, "gain_at_64": gain_64}
