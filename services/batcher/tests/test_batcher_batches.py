"""Which requests go upstream together, and when: the batcher over real gRPC (port 0) in front
of the fake upstream."""

from __future__ import annotations

import asyncio
from typing import Any

from inferline_testing.waits import wait_for_state

from .conftest import WAIT_S, MakeHarness, bytes_request, infer_request, metric


def items_of(response: Any) -> bytes:
    return bytes(response.raw_output_contents[0])


async def test_concurrent_requests_become_one_upstream_call(make_harness: MakeHarness) -> None:
    h = await make_harness(max_queue_delay_ms=10_000.0)  # only a full batch (8) goes early
    sizes = [1, 2, 1, 3, 1]  # 8 items: full
    requests = [infer_request(b"r%d" % i, n) for i, n in enumerate(sizes)]
    responses = await asyncio.gather(*(h.infer(r) for r in requests))
    assert len(h.fake.calls) == 1
    assert list(h.fake.calls[0].inputs[0].shape) == [8, 8]
    for request, response in zip(requests, responses, strict=True):
        assert response.id == request.id
        assert list(response.outputs[0].shape) == list(request.inputs[0].shape)
        assert items_of(response) == bytes(request.raw_input_contents[0])


async def test_a_partial_batch_goes_after_max_queue_delay(make_harness: MakeHarness) -> None:
    delay_s = 1.0  # long enough for all three to join, whatever the machine's load
    h = await make_harness(max_queue_delay_ms=delay_s * 1000)
    waited = metric("inferline_batcher_queue_delay_seconds_sum")
    counted = metric("inferline_batcher_queue_delay_seconds_count")
    calls = [asyncio.ensure_future(h.infer(infer_request(b"p%d" % i))) for i in range(3)]
    await wait_for_state(lambda: h.queued() == 3, WAIT_S, "3 queued")
    assert h.fake.calls == []  # a partial batch waits for company...
    responses = await asyncio.gather(*calls)
    assert len(h.fake.calls) == 1 and list(h.fake.calls[0].inputs[0].shape) == [3, 8]
    assert [r.id for r in responses] == ["p0", "p1", "p2"]
    # ...until its oldest request has waited max_queue_delay: the batcher's own record of
    # each request's wait (its clock, not the test's) says so.
    assert metric("inferline_batcher_queue_delay_seconds_count") == counted + 3
    assert metric("inferline_batcher_queue_delay_seconds_sum") - waited >= delay_s - 1e-6


async def test_zero_delay_sends_at_once_and_batches_what_waits(make_harness: MakeHarness) -> None:
    h = await make_harness(max_queue_delay_ms=0.0, max_inflight=1)
    h.fake.gate.clear()
    first = asyncio.ensure_future(h.infer(infer_request(b"first")))
    await h.fake.wait_calls(1)  # sent at once, alone; it holds the only slot
    rest = [asyncio.ensure_future(h.infer(infer_request(b"w%d" % i))) for i in range(5)]
    await wait_for_state(lambda: h.queued() == 5, WAIT_S, "5 queued")
    h.fake.gate.set()
    await asyncio.gather(first, *rest)
    assert [c.inputs[0].shape[0] for c in h.fake.calls] == [1, 5]


async def test_bytes_tensors_merge_and_split(make_harness: MakeHarness) -> None:
    h = await make_harness(max_queue_delay_ms=10_000.0, max_batch_size=4)
    groups = [[b"a", b""], [b"ccc"], [b"dd"]]  # 4 items: full
    requests = [bytes_request(items, f"b{i}") for i, items in enumerate(groups)]
    responses = await asyncio.gather(*(h.infer(r) for r in requests))
    assert len(h.fake.calls) == 1
    for request, response in zip(requests, responses, strict=True):
        assert response.outputs[0].datatype == "BYTES"
        assert items_of(response) == bytes(request.raw_input_contents[0])


async def test_mismatched_shapes_are_never_merged(make_harness: MakeHarness) -> None:
    h = await make_harness(max_queue_delay_ms=40.0)
    narrow = infer_request(b"narrow", width=8)
    wide = infer_request(b"wide", width=16)
    other_output = infer_request(b"out")
    other_output.outputs.add(name="INPUT")
    responses = await asyncio.gather(h.infer(narrow), h.infer(wide), h.infer(other_output))
    assert len(h.fake.calls) == 3
    assert sorted(list(c.inputs[0].shape) for c in h.fake.calls) == [[1, 8], [1, 8], [1, 16]]
    assert [r.id for r in responses] == ["narrow", "wide", "out"]


async def test_models_share_the_in_flight_slots_but_never_a_batch(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(max_queue_delay_ms=0.0, max_inflight=1)
    h.fake.gate.clear()
    first = asyncio.ensure_future(h.infer(infer_request(b"first")))
    await h.fake.wait_calls(1)
    rest = [
        asyncio.ensure_future(h.infer(infer_request(b"%s-%d" % (m.encode(), i), model=m)))
        for i in range(3)
        for m in ("echo", "echo2")
    ]
    await wait_for_state(
        lambda: h.queued("echo") == 3 and h.queued("echo2") == 3, WAIT_S, "3 queued per model"
    )
    h.fake.gate.set()
    await asyncio.gather(first, *rest)
    assert [(c.model_name, c.inputs[0].shape[0]) for c in h.fake.calls[1:]] in (
        [("echo", 3), ("echo2", 3)],
        [("echo2", 3), ("echo", 3)],
    )
    assert h.fake.most_in_flight == 1


async def test_max_batch_size_above_the_upstreams_is_lowered_to_it(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(max_queue_delay_ms=200.0, max_batch_size=100)
    await asyncio.gather(
        h.infer(infer_request(b"eight", items=8)), h.infer(infer_request(b"six", items=6))
    )
    assert sorted(c.inputs[0].shape[0] for c in h.fake.calls) == [6, 8]  # 14 > the fake's 8


async def test_a_model_that_does_not_batch_passes_requests_through(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(max_queue_delay_ms=10_000.0)
    responses = await asyncio.gather(
        *(h.infer(infer_request(b"x%d" % i, model="plain")) for i in range(3))
    )
    assert len(h.fake.calls) == 3  # max_batch_size 0: one call each, no waiting
    assert [r.id for r in responses] == ["x0", "x1", "x2"]
