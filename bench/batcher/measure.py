"""Load through the demo client's generator, and what it saw in the result file's terms."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.batcher.processes import MODEL, Replica, counters
from demo_client.client import open_clients
from demo_client.load import LoadConfig, run_load, tensor_requests
from demo_client.stats import Recorder

# One image a request, as the simulated GPU takes it: uint8 pixels, [1, 3, 224, 224].
REQUESTS = tensor_requests("INPUT", np.full((1, 3, 224, 224), 7, np.uint8), "PROBS")
MAX_IN_FLIGHT = 10_000  # the open loop's cap: far above what any point has in flight


def _config(seconds: float, warmup_s: float, **arrivals: Any) -> LoadConfig:
    """``warmup_s`` + ``seconds`` of the simulated GPU's requests, the last ``seconds`` measured;
    ``arrivals``: a closed loop's concurrency, or an open loop's rate and seed (LoadConfig)."""
    return LoadConfig(model=MODEL, warmup_s=warmup_s, duration_s=seconds, **arrivals)


async def closed_loop(url: str, concurrency: int, seconds: float, warmup_s: float) -> Recorder:
    """``concurrency`` requests in flight for ``warmup_s`` + ``seconds``; the last measured."""
    config = _config(seconds, warmup_s, concurrency=concurrency, timeout_s=30.0)
    recorder = Recorder(concurrency)
    async with open_clients(url) as clients:
        await run_load(clients, config, REQUESTS, recorder)
    return recorder


async def open_loop(
    url: str,
    rate: float,
    seconds: float,
    warmup_s: float,
    replicas: Sequence[Replica],
    seed: int,
) -> tuple[Recorder, dict[str, float]]:
    """Poisson arrivals at ``rate``/s (latency counts from each arrival's due time), and what
    ``replicas`` executed from the end of the warm-up until the last answer."""
    config = _config(
        seconds, warmup_s, rate=rate, seed=seed, concurrency=MAX_IN_FLIGHT, timeout_s=60.0
    )
    recorder = Recorder(MAX_IN_FLIGHT)

    async def when_measuring() -> dict[str, float]:
        await asyncio.sleep(warmup_s)  # the generator's warm-up ends now
        return await asyncio.to_thread(counters, replicas)

    async with open_clients(url) as clients:
        before = asyncio.create_task(when_measuring())
        await run_load(clients, config, REQUESTS, recorder)
        after = await asyncio.to_thread(counters, replicas)
    start = await before
    return recorder, {name: after[name] - start.get(name, 0.0) for name in after}


def _ms(value: float | None) -> float:
    return round(value, 2) if value is not None else math.nan


def summary(recorder: Recorder) -> dict[str, Any]:
    """Images/s over the measured window, successful requests, p50/p99, errors by code."""
    run = recorder.summary()
    return {
        "images_per_s": round(run.images_per_s, 1),
        "requests": run.requests - run.errors,
        "p50_ms": _ms(run.p50_ms),
        "p99_ms": _ms(run.p99_ms),
        "errors": run.errors_by_code,
    }


def late_p99_ms(recorder: Recorder) -> float:
    """How late the open loop's late arrivals went out (p99; 0 when none was): it must keep up."""
    late = recorder.lateness_ms(99)
    return late if late is not None else 0.0
