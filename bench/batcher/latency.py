"""Part 3: the latency the batcher adds at concurrency 1 (``max_queue_delay`` 0), against what a
bare forwarder adds on the same machine, and where the batcher's time goes.

Requests go straight to the replica, through a bare grpc.aio forwarder (bench.hops: raw-bytes
generic handlers, nothing parsed: what any Python hop costs here) and through the batcher, one
at a time, in rotation (who goes first rotates too), so drift hits all three alike. The batcher's
own histograms over the run say where its time went: waiting for its batch to be sent (arrival
to send), the upstream call, and the rest of its handler."""

from __future__ import annotations

import asyncio
import contextlib
import math
import urllib.request
from collections import Counter
from typing import Any

import numpy as np

from bench.batcher.measure import REQUESTS
from bench.batcher.params import Params
from bench.batcher.processes import MODEL
from demo_client.client import open_clients
from demo_client.load import send

WARMUP_ROUNDS = 20  # the first ones warm connections up
ROUTES = ("direct", "forwarder", "batcher")
# The batcher's histograms (batcher.metrics, inferline.metrics): arrival to send, the upstream
# call, and the whole handler of ModelInfer.
HISTOGRAMS = {
    "queue": "inferline_batcher_queue_delay_seconds",
    "upstream": "inferline_batcher_upstream_duration_seconds",
    "handler": "inferline_batcher_grpc_request_duration_seconds",
}


async def rotated(
    urls: dict[str, str], requests: int
) -> tuple[dict[str, list[float]], Counter[str]]:
    """One request at a time to each of ``urls`` in turn, the order rotating each round: the
    latencies (s) of each, errors by code."""
    latencies: dict[str, list[float]] = {name: [] for name in urls}
    errors: Counter[str] = Counter()
    request = REQUESTS(0)
    loop = asyncio.get_running_loop()
    names = list(urls)
    async with contextlib.AsyncExitStack() as stack:
        opened = {name: (await stack.enter_async_context(open_clients(url)))[0]
                  for name, url in urls.items()}  # fmt: skip
        for i in range(requests + WARMUP_ROUNDS):
            order = names[i % len(names) :] + names[: i % len(names)]
            for name in order:
                start = loop.time()
                error, _ = await send(opened[name], MODEL, request, 30.0)
                if i < WARMUP_ROUNDS:
                    continue
                if error is None:
                    latencies[name].append(loop.time() - start)
                else:
                    errors[f"{name}: {error}"] += 1
    return latencies, errors


def histogram_sums(metrics_url: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of each of :data:`HISTOGRAMS` (ModelInfer only), as scraped now."""
    with urllib.request.urlopen(metrics_url, timeout=5) as answer:
        text = answer.read().decode()
    found = {}
    for key, name in HISTOGRAMS.items():
        values = {"sum": 0.0, "count": 0.0}
        for line in text.splitlines():
            for part in values:
                if line.startswith(f"{name}_{part}{{") and (
                    key != "handler" or 'method="ModelInfer"' in line
                ):
                    values[part] += float(line.rsplit(" ", 1)[1])
        found[key] = (values["sum"], values["count"])
    return found


def histogram_means(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, float]:
    """Mean ms per observation of each histogram between two scrapes."""
    means = {}
    for key in HISTOGRAMS:
        total, count = after[key][0] - before[key][0], after[key][1] - before[key][1]
        means[key] = round(total / count * 1000, 3) if count else math.nan
    return means


def _p50_ms(latencies: list[float]) -> float:
    return float(np.percentile(latencies, 50) * 1000) if latencies else math.nan


async def part_latency(
    params: Params, direct: str, forwarder: str, batcher: str, batcher_metrics: str
) -> dict[str, Any]:
    before = await asyncio.to_thread(histogram_sums, batcher_metrics)
    urls = {"direct": direct, "forwarder": forwarder, "batcher": batcher}
    latencies, errors = await rotated(urls, params.latency_requests)
    after = await asyncio.to_thread(histogram_sums, batcher_metrics)
    p50 = {name: _p50_ms(latencies[name]) for name in ROUTES}
    means = histogram_means(before, after)
    return {
        "direct_p50_ms": round(p50["direct"], 3),
        "forwarder_p50_ms": round(p50["forwarder"], 3),
        "batcher_p50_ms": round(p50["batcher"], 3),
        "added_p50_ms": round(p50["batcher"] - p50["direct"], 3),
        # what any Python hop adds here, and what is the batcher's own beyond it
        "forwarder_added_p50_ms": round(p50["forwarder"] - p50["direct"], 3),
        "own_p50_ms": round(p50["batcher"] - p50["forwarder"], 3),
        # inside the batcher's handler, mean ms per request (its own histograms)
        "batcher_handler_mean_ms": means["handler"],
        "batcher_arrival_to_send_mean_ms": means["queue"],
        "batcher_upstream_mean_ms": means["upstream"],
        "requests": params.latency_requests,
        "errors": dict(errors),
    }
