"""Part 3: the latency the batcher adds at concurrency 1 (``max_queue_delay`` 0), measured as
requests straight to the replica and through the batcher, interleaved."""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from typing import Any

import numpy as np

from bench.batcher.measure import REQUESTS
from bench.batcher.params import Params
from bench.batcher.processes import MODEL
from demo_client.client import open_clients
from demo_client.load import send

WARMUP_PAIRS = 20  # the first ones warm connections up


async def interleaved(
    direct: str, batcher: str, requests: int
) -> tuple[list[float], list[float], Counter[str]]:
    """One request at a time, alternating direct and through the batcher (who goes first
    alternates too), so drift hits both alike: the latencies (s) of each, errors by code."""
    latencies: tuple[list[float], list[float]] = ([], [])
    errors: Counter[str] = Counter()
    request = REQUESTS(0)
    loop = asyncio.get_running_loop()
    async with open_clients(direct) as a, open_clients(batcher) as b:
        pairs = [(latencies[0], a[0]), (latencies[1], b[0])]
        for i in range(requests + WARMUP_PAIRS):
            for measured, client in pairs if i % 2 else pairs[::-1]:
                start = loop.time()
                error = await send(client, MODEL, request, 30.0)
                if i < WARMUP_PAIRS:
                    continue
                if error is None:
                    measured.append(loop.time() - start)
                else:
                    errors[error] += 1
    return latencies[0], latencies[1], errors


def _p50_ms(latencies: list[float]) -> float:
    return float(np.percentile(latencies, 50) * 1000) if latencies else math.nan


async def part_latency(params: Params, direct: str, batcher: str) -> dict[str, Any]:
    plain, batched, errors = await interleaved(direct, batcher, params.latency_requests)
    pairs = zip(batched, plain, strict=False)  # neighbours in time
    paired = float(np.median([b - a for b, a in pairs])) * 1000 if plain else math.nan
    return {
        "direct_p50_ms": round(_p50_ms(plain), 3),
        "batcher_p50_ms": round(_p50_ms(batched), 3),
        "added_p50_ms": round(_p50_ms(batched) - _p50_ms(plain), 3),
        "added_median_of_pairs_ms": round(paired, 3),
        "requests": params.latency_requests,
        "errors": dict(errors),
    }
