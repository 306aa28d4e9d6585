"""The scheduler's bookkeeping under races that gRPC makes rare and a loaded machine makes real:
driven directly on asyncio (no network), so each interleaving is the one the test names."""

from __future__ import annotations

import asyncio

from batcher.inflight import InFlight
from batcher.scheduler import ModelBatcher, Settings
from inferline_testing.waits import wait_for_state

from .conftest import WAIT_S, infer_request

SETTINGS = Settings(max_batch_size=2, max_queue_delay_s=60.0, max_queue=8, default_timeout_s=60.0)


class HeldUpstream:
    """Answers each request with its own bytes once ``gate`` opens; counts the calls."""

    name = "held upstream"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.calls = 0

    async def infer(self, request: bytes, time_left: float) -> bytes:
        self.calls += 1
        await self.gate.wait()
        return request

    async def max_batch_size(self, model: str, version: str, time_left: float) -> int:
        return SETTINGS.max_batch_size


async def submit(batcher: ModelBatcher, tag: bytes, items: int = 1) -> bytes:
    request = infer_request(tag, items)
    return await batcher.infer(request, request.SerializeToString(), None)


async def test_a_batch_whose_callers_all_left_before_it_started_gives_its_slot_back() -> None:
    """Callers cancelled (a deadline, a client gone) in the same turn as their batch is sent:
    the batch's task is cancelled before its first step, so its body never runs. Its in-flight
    slot must come back all the same, or each such race costs a slot until none is left and
    the batcher sends nothing again."""
    upstream, inflight = HeldUpstream(), InFlight(1)
    batcher = ModelBatcher("echo", 2, SETTINGS, inflight, upstream)
    blocker = asyncio.ensure_future(submit(batcher, b"full", 2))  # a full batch: the only slot
    await wait_for_state(lambda: upstream.calls == 1, WAIT_S, "the blocker sent")
    leaving = [asyncio.ensure_future(submit(batcher, tag)) for tag in (b"a", b"b")]
    await wait_for_state(lambda: len(batcher.queue) == 2, WAIT_S, "a full batch queued")
    for task in leaving:
        task.cancel()  # their futures are cancelled; they leave at their next step
    inflight.limit += 1  # a slot appears (the adaptive limit rising) ...
    assert batcher.pump() is None  # ... and their batch is sent, behind their exits
    assert inflight.used == 2
    outcomes = await asyncio.gather(*leaving, return_exceptions=True)
    assert [type(outcome) for outcome in outcomes] == [asyncio.CancelledError] * 2  # they left
    upstream.gate.set()
    await blocker
    await wait_for_state(lambda: inflight.used == 0, WAIT_S, "every slot given back")
    assert upstream.calls == 1  # the abandoned batch never reached the upstream
    assert await submit(batcher, b"later", 2)  # and the batcher still sends
    await batcher.close()
