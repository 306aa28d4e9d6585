"""Part 4: the batch hop over two GPUs of unequal speed, dialled through Envoy (least request)
or proxyless (gRPC's own xDS client: round robin), each behind its own batcher.

Two simulated replicas, one taking twice the other's time for a batch, serve one cluster; the
control plane feeds it to Envoy and to a batcher that dials ``xds:///<cluster>`` itself. A closed
loop of callers runs at each batcher in turn: what share of the images each replica got, the
images/s and the latency. Least request sends the faster GPU about its share of the capacity
(two thirds); round robin halves the traffic, and the slower GPU's queue sets the tail.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench.batcher.measure import closed_loop, summary
from bench.batcher.params import Params
from bench.batcher.processes import Fleet, Replica
from bench.batcher.report import console

CLUSTER = "unequal"
CLOCK = 5.0  # the faster replica's clock slowed this much, so that these cores are not the limit
SLOWER = 2.0  # the other replica's batch takes this many times the faster's
CONCURRENCY = 48


async def replicas(params: Params, fleet: Fleet) -> tuple[Replica, Replica]:
    """The two replicas (:meth:`Fleet.ready` waits for them)."""
    fast = await fleet.replica("replica-faster", params, CLOCK, None)
    slow = await fleet.replica("replica-slower", params, CLOCK * SLOWER, None)
    return fast, slow


async def part_balance(
    params: Params, fleet: Fleet, fast: Replica, slow: Replica
) -> dict[str, Any]:
    listeners = await fleet.behind_envoy({CLUSTER: [fast, slow]})
    through_envoy = await fleet.batcher("batcher-balance-envoy", listeners[CLUSTER], 0.0, 4)
    proxyless = await fleet.batcher(
        "batcher-balance-proxyless", f"xds:///{CLUSTER}", 0.0, 4, env=fleet.xds_bootstrap_env()
    )
    result: dict[str, Any] = {"clock": CLOCK, "slower": SLOWER, "concurrency": CONCURRENCY}
    for name, url in (("envoy_least_request", through_envoy), ("proxyless_round_robin", proxyless)):
        before = await asyncio.gather(*(asyncio.to_thread(r.counters) for r in (fast, slow)))
        recorder = await closed_loop(url, CONCURRENCY, params.throughput_s, params.warmup_s)
        after = await asyncio.gather(*(asyncio.to_thread(r.counters) for r in (fast, slow)))
        images = [a["images"] - b["images"] for a, b in zip(after, before, strict=True)]
        result[name] = {
            **summary(recorder),
            "images_to_the_faster": images[0],
            "images_to_the_slower": images[1],
            "share_to_the_faster": round(images[0] / max(1, sum(images)), 2),
        }
        point = result[name]
        console.print(
            f"  {name}: {point['images_per_s']:.1f} images/s, p50 {point['p50_ms']:.1f} ms, p99 "
            f"{point['p99_ms']:.1f} ms, {point['share_to_the_faster']:.2f} of the images to the "
            "faster GPU"
        )
    return result
