"""The limits over real gRPC: the queue's length, the batches in flight, and the adaptive
in-flight limit."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from prometheus_client import REGISTRY

from inferline_testing.waits import wait_for_state

from .conftest import WAIT_S, Harness, MakeHarness, infer_request, metric


async def test_a_full_queue_refuses_with_the_limit(make_harness: MakeHarness) -> None:
    h = await make_harness(max_queue=2, max_inflight=1, max_queue_delay_ms=0.0)
    before = metric("inferline_batcher_rejected_requests_total")
    h.fake.gate.clear()
    busy = asyncio.ensure_future(h.infer(infer_request(b"busy")))
    await h.fake.wait_calls(1)
    waiting = [asyncio.ensure_future(h.infer(infer_request(b"w%d" % i))) for i in range(2)]
    await wait_for_state(lambda: h.queued() == 2, WAIT_S, "2 queued")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await h.infer(infer_request(b"one-too-many"))
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "2 requests are waiting" in (raised.value.details() or "")
    assert "INFERLINE_BATCHER_MAX_QUEUE" in (raised.value.details() or "")
    assert metric("inferline_batcher_rejected_requests_total") == before + 1
    h.fake.gate.set()
    await asyncio.gather(busy, *waiting)


async def test_batches_in_flight_are_limited(make_harness: MakeHarness) -> None:
    h = await make_harness(max_queue_delay_ms=0.0, max_inflight=2, max_batch_size=1)
    h.fake.gate.clear()
    calls = [asyncio.ensure_future(h.infer(infer_request(b"i%d" % i))) for i in range(6)]
    await h.fake.wait_calls(2)
    await wait_for_state(lambda: h.queued() == 4, WAIT_S, "4 queued")
    gauge = metric("inferline_batcher_inflight_batches")
    assert gauge == 2
    h.fake.gate.set()
    await asyncio.gather(*calls)
    assert h.fake.most_in_flight == 2 and len(h.fake.calls) == 6


async def closed_loop_batches(h: Harness, clients: int = 16, rounds: int = 12) -> list[int]:
    """``clients`` callers each sending ``rounds`` requests one after another, behind one GPU
    (calls run one at a time, 20 ms each): the sizes of the batches sent, in order."""
    h.fake.gpu_s = 0.02

    async def client(index: int) -> None:
        for round_ in range(rounds):
            await h.infer(infer_request(b"c%d-%d" % (index, round_)))

    await asyncio.gather(*(client(i) for i in range(clients)))
    return [c.inputs[0].shape[0] for c in h.fake.calls]


async def test_the_adaptive_in_flight_limit_fills_one_gpus_batches(
    make_harness: MakeHarness,
) -> None:
    """Behind one GPU the batches sent beyond the first only queue there: the adaptive limit
    comes down from max_inflight, so what waits merges into batches fuller than the 16 callers
    spread over 8 slots would make. How much fuller depends on how fast this machine's callers
    come back (8 a batch here when idle, 3 under make test's load); so does a fixed limit's
    (2 to 8), which is why none is compared."""
    h = await make_harness(
        max_queue_delay_ms=1.0, max_inflight=8, adaptive_inflight=True, max_batch_size=8
    )
    seen: list[float] = []  # the limit while the load runs (as it ends, it may climb again)

    async def watch() -> None:
        while True:
            value = REGISTRY.get_sample_value("inferline_batcher_inflight_limit_batches")
            if value is not None:
                seen.append(value)
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    sizes = await closed_loop_batches(h)
    watcher.cancel()
    limit = min(seen, default=None)
    late = sizes[len(sizes) // 2 :]
    print(f"lowest in-flight limit {limit}; batch sizes {sizes}")
    assert limit is not None and limit < 8  # it came down from the maximum...
    assert sum(late) / len(late) > 16 / 8  # ...and the later batches merged what waited


async def test_the_adaptive_limit_takes_no_slot_for_a_small_batch_being_slower_per_item(
    make_harness: MakeHarness,
) -> None:
    """Many GPUs, each call at once, taking t0 + k·b: full batches first (the fastest time per
    item), then one caller alone. Its batches of one take longer per item than a full batch
    but no longer than a batch of one takes: nothing queued, so the limit keeps its slots."""
    h = await make_harness(
        max_queue_delay_ms=1.0, max_inflight=8, adaptive_inflight=True, max_batch_size=8
    )
    h.fake.gpu_s, h.fake.item_s, h.fake.gpus = 0.05, 0.005, True

    async def client(index: int, rounds: int) -> None:
        for round_ in range(rounds):
            await h.infer(infer_request(b"c%d-%d" % (index, round_)))

    await asyncio.gather(*(client(i, 3) for i in range(16)))
    await client(99, 10)
    limit = REGISTRY.get_sample_value("inferline_batcher_inflight_limit_batches")
    sizes = [c.inputs[0].shape[0] for c in h.fake.calls]
    print(f"in-flight limit {limit}; batch sizes {sizes}")
    assert max(sizes) > 4 and sizes[-10:] == [1] * 10  # full batches, then batches of one
    assert limit is not None and limit >= 6  # 55 ms per item against 10: not queueing
