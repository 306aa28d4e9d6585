"""The batcher over real gRPC (port 0) in front of a fake upstream that we control."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as triton
from prometheus_client import REGISTRY
from tritonclient.grpc import service_pb2

from batcher.config import Config
from inferline.config import ConfigError, load
from inferline_testing.waits import wait_for_state

from .conftest import POISON, WAIT_S, MakeHarness, bytes_request, infer_request


def metric(name: str, model: str = "echo") -> float:
    return REGISTRY.get_sample_value(name, {"model": model}) or 0.0


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


async def test_pass_through_rpcs(make_harness: MakeHarness) -> None:
    h = await make_harness()
    async with triton.InferenceServerClient(h.url) as client:  # any Triton client works
        assert await client.is_server_live()
        assert await client.is_server_ready()
        assert await client.is_model_ready("echo")
        assert not await client.is_model_ready("nope")
        assert (await client.get_server_metadata()).name == "fake-upstream"
        assert (await client.get_model_metadata("echo")).platform == "fake"
        assert (await client.get_model_config("echo")).config.max_batch_size == 8
        with pytest.raises(Exception, match="unknown model nope"):
            await client.get_model_metadata("nope")
        tensor = triton.InferInput("INPUT", [2, 3], "UINT8")
        tensor.set_data_from_numpy(np.arange(6, dtype=np.uint8).reshape(2, 3))
        result = await client.infer("echo", [tensor], request_id="via-tritonclient")
        assert result.get_response().id == "via-tritonclient"
        np.testing.assert_array_equal(
            result.as_numpy("INPUT"), np.arange(6, dtype=np.uint8).reshape(2, 3)
        )


async def test_streaming_passes_through(make_harness: MakeHarness) -> None:
    h = await make_harness()

    async def requests() -> Any:
        for tag in (b"s1", b"s2"):
            yield infer_request(tag)

    responses = [r async for r in h.stub.ModelStreamInfer(requests(), timeout=10.0)]
    assert [r.infer_response.id for r in responses] == ["s1", "s2"]
    assert h.fake.calls == []  # streams are not batched


async def test_custom_metadata_reaches_the_upstream(make_harness: MakeHarness) -> None:
    h = await make_harness()
    await h.stub.ModelConfig(
        service_pb2.ModelConfigRequest(name="echo"), metadata=(("x-trace", "abc"),), timeout=5.0
    )
    assert h.fake.metadata[-1]["x-trace"] == "abc"


def test_config_fails_by_name() -> None:
    with pytest.raises(ConfigError, match="INFERLINE_BATCHER_MAX_INFLIGHT"):
        load(Config, "INFERLINE_BATCHER", environ={"INFERLINE_BATCHER_MAX_INFLIGHT": "0"})
    with pytest.raises(ConfigError, match="INFERLINE_BATCHER_MAX_QUEUE_DELAY_MS"):
        load(Config, "INFERLINE_BATCHER", environ={"INFERLINE_BATCHER_MAX_QUEUE_DELAY_MS": "x"})
    with pytest.raises(ConfigError, match="INFERLINE_BATCHER_MAX_BATCH_SIZE"):
        load(Config, "INFERLINE_BATCHER", argv=["--max-batch-size", "-1"])
    config = load(Config, "INFERLINE_BATCHER", environ={"INFERLINE_BATCHER_PORT": "9000"})
    assert (config.port, config.metrics_port, config.upstream_url) == (9000, 9182, "localhost:8001")


async def test_the_adaptive_in_flight_limit_fills_one_gpus_batches(
    make_harness: MakeHarness,
) -> None:
    """Behind one GPU (calls run one at a time) the batches sent beyond the first only queue
    there: the adaptive limit comes down from max_inflight, so what waits merges into fuller
    batches instead of travelling in small ones."""
    h = await make_harness(
        max_queue_delay_ms=1.0, max_inflight=8, adaptive_inflight=True, max_batch_size=8
    )
    h.fake.gpu_s = 0.02

    async def client(index: int) -> None:
        for round_ in range(12):
            await h.infer(infer_request(b"c%d-%d" % (index, round_)))

    seen: list[float] = []  # the limit while the load runs (as it ends, it may climb again)

    async def watch() -> None:
        while True:
            value = REGISTRY.get_sample_value("inferline_batcher_inflight_limit_batches")
            if value is not None:
                seen.append(value)
            await asyncio.sleep(0.005)

    watcher = asyncio.create_task(watch())
    await asyncio.gather(*(client(i) for i in range(16)))
    watcher.cancel()
    limit = min(seen, default=None)
    sizes = [c.inputs[0].shape[0] for c in h.fake.calls]
    late = sizes[len(sizes) // 2 :]
    print(f"lowest in-flight limit {limit}; batch sizes {sizes}")
    assert limit is not None and limit < 8  # it came down from the maximum...
    assert sum(late) / len(late) > 4  # ...and the later batches are fuller than 16 / 8


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
