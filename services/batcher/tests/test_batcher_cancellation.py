"""Callers that go away, over real gRPC: their batch-mates are unharmed, and an upstream call
nobody waits for is cancelled."""

from __future__ import annotations

import asyncio

import pytest

from inferline_testing.waits import wait_for_state

from .conftest import WAIT_S, MakeHarness, infer_request, metric


async def test_a_cancelled_caller_leaves_its_batch_without_harm(make_harness: MakeHarness) -> None:
    h = await make_harness(max_queue_delay_ms=10_000.0, max_batch_size=4)
    before = metric("inferline_batcher_cancelled_requests_total")
    stay = [asyncio.ensure_future(h.infer(infer_request(b"s%d" % i))) for i in range(2)]
    leave = asyncio.ensure_future(h.infer(infer_request(b"leave")))
    await wait_for_state(lambda: h.queued() == 3, WAIT_S, "3 queued")
    leave.cancel()
    await wait_for_state(lambda: h.queued() == 2, WAIT_S, "2 queued")
    stay += [asyncio.ensure_future(h.infer(infer_request(b"s%d" % i))) for i in (2, 3)]  # full
    responses = await asyncio.gather(*stay)
    assert [r.id for r in responses] == ["s0", "s1", "s2", "s3"]
    assert len(h.fake.calls) == 1 and b"leave" not in bytes(h.fake.calls[0].raw_input_contents[0])
    assert metric("inferline_batcher_cancelled_requests_total") == before + 1


async def test_a_caller_cancelled_in_flight_does_not_fail_the_others(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(max_queue_delay_ms=10_000.0, max_batch_size=2)
    before = metric("inferline_batcher_cancelled_requests_total")
    h.fake.gate.clear()
    leave = asyncio.ensure_future(h.infer(infer_request(b"leave")))
    stay = asyncio.ensure_future(h.infer(infer_request(b"stay")))
    await h.fake.wait_calls(1)
    leave.cancel()
    await wait_for_state(
        lambda: metric("inferline_batcher_cancelled_requests_total") == before + 1,
        WAIT_S,
        "the cancellation counted",
    )
    h.fake.gate.set()
    assert (await stay).id == "stay"
    with pytest.raises(asyncio.CancelledError):
        await leave


async def test_when_every_caller_leaves_the_upstream_call_is_cancelled(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(max_queue_delay_ms=0.0)
    h.fake.gate.clear()
    call = asyncio.ensure_future(h.infer(infer_request(b"gone")))
    await h.fake.wait_calls(1)
    call.cancel()
    await wait_for_state(lambda: h.fake.cancelled == 1, WAIT_S, "the upstream call cancelled")
