"""Requests with a deadline shorter than the pipeline's fastest answer, sent one at a time under
a background load: refused DEADLINE_EXCEEDED, and never reaching Triton."""

from __future__ import annotations

import asyncio
import urllib.request
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from demo_client.client import open_clients
from demo_client.load import LoadConfig, Outcome, run_load
from demo_client.stats import Recorder, Summary
from inferline_stack.config import StackConfig
from inferline_testing.overload.crowds import offer
from inferline_testing.waits import wait_for_state


def triton_inferences(config: StackConfig) -> float:
    """Items Triton inferred so far (``nv_inference_count``), from its own metrics."""
    url = f"http://127.0.0.1:{config.replica_ports('triton', 0)[2]}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "nv_inference_count"
        for sample in family.samples
    )


SHORT_DEADLINE_S = 0.05
# The background load meanwhile: busy, but under middleman's admission floor (32 in flight), so
# nothing is refused for load and nothing shed at the front door: each 50 ms request meets
# middleman's deadline check, not the crowd's.
SHORT_CALLERS = 24


@dataclass(frozen=True)
class ShortDeadlines:
    """Requests with a deadline shorter than the pipeline's fastest answer, sent one at a time
    under load; the background load's summary, and the items Triton inferred meanwhile."""

    outcomes: list[Outcome]
    background: Summary
    inferred: float

    def refused(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.error == "DEADLINE_EXCEEDED"]

    def to_dict(self) -> dict[str, Any]:
        refused = self.refused()
        slowest = max((o.latency_s for o in refused), default=None)
        return {
            "deadline_ms": SHORT_DEADLINE_S * 1000,
            "background_callers": SHORT_CALLERS,
            "requests": len(self.outcomes),
            "by_status": dict(Counter(o.error or "OK" for o in self.outcomes)),
            "refused": len(refused),
            "slowest_refusal_ms": None if slowest is None else round(slowest * 1000, 1),
        }


async def short_deadlines(
    config: StackConfig, images: Sequence[bytes], count: int = 20
) -> ShortDeadlines:
    """``count`` requests of ``images[0]`` with a :data:`SHORT_DEADLINE_S` deadline, one at a
    time (the demo client's loop, one caller), once the background load (:data:`SHORT_CALLERS`
    callers) has had Triton answer a few batches."""
    target = f"127.0.0.1:{config.public_port}"
    before = triton_inferences(config)
    background = asyncio.create_task(
        offer(target, images, duration_s=8.0, concurrency=SHORT_CALLERS, channels=2)
    )
    short = LoadConfig(concurrency=1, count=count, duration_s=None, timeout_s=SHORT_DEADLINE_S)
    outcomes: list[Outcome] = []
    async with open_clients(target) as clients:
        await wait_for_state(
            lambda: triton_inferences(config) - before >= 96,
            60.0,
            "96 images of the background load inferred",
            abort=lambda: ended(background),
        )
        await run_load(clients, short, images[:1], Recorder(), on_outcome=outcomes.append)
    summary = await background
    return ShortDeadlines(outcomes, summary, triton_inferences(config) - before)


def ended(load: asyncio.Task[Summary]) -> str | None:
    """Why waiting on ``load`` is pointless: it has ended (saying how), or None."""
    if not load.done():
        return None
    if load.cancelled():
        return "the load was cancelled"
    if (error := load.exception()) is not None:
        return f"the load failed: {error!r}"
    summary = load.result()
    return f"the load ended: {summary.images} images served, failed {summary.errors_by_code}"
