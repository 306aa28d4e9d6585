"""Failures over real gRPC: the upstream's errors reach only their batch and are never retried
here; an upstream that is down, an unknown model and garbage are refused."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from inferline_testing.waits import wait_for_state

from .conftest import POISON, WAIT_S, MakeHarness, infer_request


async def test_an_upstream_failure_fails_only_its_batch(make_harness: MakeHarness) -> None:
    h = await make_harness(max_queue_delay_ms=10_000.0, max_batch_size=2, max_inflight=1)
    h.fake.gate.clear()
    calls = [asyncio.ensure_future(h.infer(infer_request(t))) for t in (POISON, b"mate")]
    await h.fake.wait_calls(1)  # [POISON, mate] went up, and holds the only slot
    calls += [asyncio.ensure_future(h.infer(infer_request(t))) for t in (b"g1", b"g2")]
    await wait_for_state(lambda: h.queued() == 2, WAIT_S, "2 queued")
    h.fake.gate.set()
    results = await asyncio.gather(*calls, return_exceptions=True)
    for failed in results[:2]:
        assert isinstance(failed, grpc.aio.AioRpcError)
        assert failed.code() == grpc.StatusCode.INVALID_ARGUMENT  # the upstream's own status
        assert "an item is poisoned" in (failed.details() or "")
        assert h.url not in (failed.details() or "")  # names the upstream, not itself
        assert "upstream 127.0.0.1:" in (failed.details() or "")
    assert [getattr(r, "id", r) for r in results[2:]] == ["g1", "g2"]
    assert len(h.fake.calls) == 2


async def test_an_upstream_unavailable_is_passed_up_at_once_never_retried_here(
    make_harness: MakeHarness,
) -> None:
    """Envoy's hop in front of the pool retries (on another replica, within its budget);
    a second retry here would double the attempts a failing pool gets."""
    h = await make_harness(max_queue_delay_ms=0.0)
    for code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.INTERNAL):
        h.fake.failures = [code]
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await h.infer(infer_request(code.name.lower().encode()))
        assert raised.value.code() == code
        assert "upstream 127.0.0.1:" in (raised.value.details() or "")
    assert len(h.fake.calls) == 2  # one call each
    h.fake.failures = []
    assert (await h.infer(infer_request(b"after"))).id == "after"  # the batcher stays up


async def test_upstream_down_is_unavailable(make_harness: MakeHarness) -> None:
    h = await make_harness(upstream_url="127.0.0.1:1")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await h.infer(infer_request(b"nowhere"), deadline_s=5.0)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "model config of 'echo'" in (raised.value.details() or "")


async def test_unknown_model_and_garbage_requests(make_harness: MakeHarness) -> None:
    h = await make_harness()
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await h.infer(infer_request(b"who", model="nope"))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    assert "unknown model nope" in (raised.value.details() or "")
    garbage = h.channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await garbage(b"\xff\xff\xff", timeout=5.0)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
