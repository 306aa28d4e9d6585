"""Deadlines over real gRPC: a request expires before it is sent, a batch may take as long as
its most patient caller allows, and a request no upstream call could answer in time is not
sent."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from inferline_testing.waits import wait_for_state

from .conftest import WAIT_S, MakeHarness, infer_request, metric


async def test_deadline_expiry_drops_the_request_before_dispatch(make_harness: MakeHarness) -> None:
    h = await make_harness(max_queue_delay_ms=10_000.0)
    before = metric("inferline_batcher_expired_requests_total")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await h.infer(infer_request(b"late"), deadline_s=0.2)
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    await wait_for_state(
        lambda: metric("inferline_batcher_expired_requests_total") == before + 1,
        WAIT_S,
        "the expiry counted",
    )
    assert h.fake.calls == []
    assert h.queued() == 0


async def test_a_tight_deadline_never_cuts_its_batch_mates_short(make_harness: MakeHarness) -> None:
    h = await make_harness(max_queue_delay_ms=10_000.0, max_batch_size=3)
    h.fake.gate.clear()  # the upstream answers only when told
    tight = asyncio.ensure_future(h.infer(infer_request(b"tight"), deadline_s=0.5))
    others = [
        asyncio.ensure_future(h.infer(infer_request(b"loose"), deadline_s=200.0)),
        asyncio.ensure_future(h.infer(infer_request(b"none"), deadline_s=None)),
    ]
    await h.fake.wait_calls(1)
    (left,) = h.fake.time_left
    # The most patient caller's deadline went upstream (the wire encodes it coarsely), not the
    # tight one's: the batch may take as long as anyone in it still waits.
    assert left is not None and 150.0 < left < 202.0
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await tight
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    h.fake.gate.set()
    answers = await asyncio.gather(*others)
    assert [a.id for a in answers] == ["loose", "none"]


async def test_a_request_the_upstream_cannot_answer_in_time_is_never_sent(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(max_queue_delay_ms=0.0)
    await h.infer(infer_request(b"first"))  # the model's batcher exists now
    batcher = h.service.batchers._batchers[("echo", "")]
    batcher.fastest_s = {1: 2.0}  # as if no upstream call had been faster than two seconds
    h.fake.gate.clear()
    busy = asyncio.ensure_future(h.infer(infer_request(b"busy")))  # the upstream is busy
    await h.fake.wait_calls(2)
    expired = metric("inferline_batcher_expired_requests_total")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await h.infer(infer_request(b"hopeless"), deadline_s=1.0)
    assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "less than the fastest upstream call (2000.0 ms)" in (raised.value.details() or "")
    assert "not sent upstream" in (raised.value.details() or "")
    assert metric("inferline_batcher_expired_requests_total") == expired + 1
    h.fake.gate.set()
    await busy
    assert len(h.fake.calls) == 2  # the hopeless request never reached the upstream
    await h.infer(infer_request(b"patient"), deadline_s=10.0)
    assert len(h.fake.calls) == 3


async def test_one_slow_call_does_not_hold_back_what_an_idle_upstream_can_answer(
    make_harness: MakeHarness,
) -> None:
    """A first call that took long (a cold model, a 64 MiB request) says nothing of the next:
    with nothing in flight, a request with less time left than that call took is still sent.
    (An average of call times once refused every request for good after one slow call: only
    answered calls could bring it down, and none was sent.)"""
    h = await make_harness(max_queue_delay_ms=0.0)
    await h.infer(infer_request(b"first"))  # the model's batcher exists now
    batcher = h.service.batchers._batchers[("echo", "")]
    batcher.fastest_s = {1: 5.0}  # as if its calls so far had all taken five seconds
    response = await h.infer(infer_request(b"quick"), deadline_s=2.0)
    assert response.id == "quick" and len(h.fake.calls) == 2


async def test_only_answered_calls_say_how_long_an_upstream_call_takes(
    make_harness: MakeHarness,
) -> None:
    h = await make_harness(max_queue_delay_ms=0.0)
    h.fake.failures.append(grpc.StatusCode.INVALID_ARGUMENT)
    with pytest.raises(grpc.aio.AioRpcError):
        await h.infer(infer_request(b"failed"))
    batcher = h.service.batchers._batchers[("echo", "")]
    assert batcher.fastest_call_s == 0.0  # a failure, however long it took, is no answer time
    await h.infer(infer_request(b"answered"))
    assert batcher.fastest_call_s > 0.0
