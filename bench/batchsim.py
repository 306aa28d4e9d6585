"""A discrete-event queueing model of the two arrangements the batcher benchmark measures.

What theory predicts for the benchmark's parameters, printed beside what was measured:

* ``triton``: a per-request balancer (least request, ties broken at random) in front of N
  replicas, each with Triton's dynamic batcher and one instance. As measured on this Triton: a
  batch is formed when it is full or its oldest request has waited ``max_queue_delay`` (even
  while the instance is busy, then it waits for the instance and no longer grows); at most one
  formed batch waits, and the requests behind it keep gathering;
* ``batcher``: one batcher in front of the balancer (a batch goes when full or when its oldest
  request has waited ``max_queue_delay``, and one of ``max_inflight`` slots is free), replicas
  without dynamic batching.

A batch of b items takes ``t0 + k*b`` on a replica; arrivals are Poisson; no network, no CPU.
"""

from __future__ import annotations

import heapq
import itertools
import random
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class Prediction:
    mean_batch: float
    p50_s: float
    p99_s: float
    images_per_busy_s: float


def simulate(
    arrangement: str,
    replicas: int,
    rate: float,
    max_batch: int,
    t0: float,
    k: float,
    delay: float,
    max_inflight: int | None = None,
    requests: int = 20_000,
    seed: int = 1,
) -> Prediction:
    """Times in seconds, ``rate`` in requests (of one item) per second."""
    if arrangement not in ("triton", "batcher"):
        raise ValueError(f"unknown arrangement {arrangement!r}")
    rng = random.Random(seed)
    slots = max_inflight or replicas
    events: list[tuple[float, int, str, int]] = []
    order = itertools.count()
    arrived: list[float] = []
    done: list[float] = []
    now = 0.0
    for _ in range(requests):
        now += rng.expovariate(rate)
        arrived.append(now)
        done.append(0.0)
        heapq.heappush(events, (now, next(order), "arrive", len(arrived) - 1))

    queues: list[deque[list[int]]] = [deque() for _ in range(replicas)]  # requests or batches
    staged: list[list[int] | None] = [None] * replicas  # triton: the batch formed next
    busy = [False] * replicas
    active = [0] * replicas  # what the balancer counts: requests (triton) or batches (batcher)
    running: list[list[int]] = [[] for _ in range(replicas)]
    waiting: deque[int] = deque()  # the batcher's queue
    in_flight = 0
    batches: list[int] = []

    def pick() -> int:
        least = min(active)
        return rng.choice([i for i in range(replicas) if active[i] == least])

    def run(replica: int, items: list[int], t: float) -> None:
        busy[replica] = True
        running[replica] = items
        batches.append(len(items))
        heapq.heappush(events, (t + t0 + k * len(items), next(order), "done", replica))

    def triton_step(replica: int, t: float) -> None:
        """Triton's dynamic batcher, as measured: a batch is formed (and frozen) when it is full
        or its oldest request has waited the delay, even while the instance is busy; at most one
        formed batch waits for the instance, and the requests behind it keep gathering."""
        queue = queues[replica]
        if staged[replica] is None and queue:
            size = sum(len(q) for q in queue)
            oldest = arrived[queue[0][0]]
            if size >= max_batch or t >= oldest + delay - 1e-12:
                items: list[int] = []
                while queue and len(items) + len(queue[0]) <= max_batch:
                    items += queue.popleft()
                staged[replica] = items
            else:
                heapq.heappush(events, (oldest + delay, next(order), "wake", replica))
        if not busy[replica] and staged[replica] is not None:
            items, staged[replica] = staged[replica] or [], None
            run(replica, items, t)
            triton_step(replica, t)  # the next batch may be due already

    def start(replica: int, t: float) -> None:
        if arrangement == "triton":
            triton_step(replica, t)
        elif not busy[replica] and queues[replica]:
            run(replica, queues[replica].popleft(), t)

    def dispatch(t: float) -> None:
        """The batcher: a batch goes when full or its oldest waited the delay, if a slot is free."""
        nonlocal in_flight
        while waiting and in_flight < slots:
            if len(waiting) < max_batch and t < arrived[waiting[0]] + delay - 1e-12:
                heapq.heappush(events, (arrived[waiting[0]] + delay, next(order), "wake", -1))
                return
            items = [waiting.popleft() for _ in range(min(max_batch, len(waiting)))]
            in_flight += 1
            replica = pick()
            active[replica] += 1
            queues[replica].append(items)
            start(replica, t)

    while events:
        now, _, kind, index = heapq.heappop(events)
        if kind == "arrive":
            if arrangement == "batcher":
                waiting.append(index)
                dispatch(now)
            else:
                replica = pick()
                active[replica] += 1
                queues[replica].append([index])
                start(replica, now)
        elif kind == "done":
            items = running[index]
            busy[index] = False
            for request in items:
                done[request] = now
            if arrangement == "batcher":
                active[index] -= 1
                in_flight -= 1
                dispatch(now)
            else:
                active[index] -= len(items)
            start(index, now)
        elif index < 0:
            dispatch(now)
        else:
            start(index, now)

    skip = requests // 10  # the first tenth warms the queues up
    latencies = sorted(done[i] - arrived[i] for i in range(skip, requests))
    measured = batches[len(batches) // 10 :]
    busy_s = sum(t0 + k * b for b in measured)
    return Prediction(
        mean_batch=sum(measured) / len(measured),
        p50_s=latencies[len(latencies) // 2],
        p99_s=latencies[int(len(latencies) * 0.99)],
        images_per_busy_s=sum(measured) / busy_s,
    )
