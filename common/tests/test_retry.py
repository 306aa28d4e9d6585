"""Retries for a hop dialled proxyless: what is retried, how often, within which budget; and
the trailer that tells a relayed error from a replica's own, set by a real grpc.aio server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from inferline import capacity, dial
from inferline.errors import ANSWERED, InferError, from_upstream, grpc_boundary
from inferline.retry import REFUSED, RETRIED, RetryBudget, back_off, retried, retryable
from inferline_testing.ports import free_port

SERVICE = "test.Retry"


def failure(code: grpc.StatusCode, *trailers: tuple[str, str]) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        code, grpc.aio.Metadata(), grpc.aio.Metadata(*trailers), details=code.name
    )


def test_a_replica_going_away_is_retryable_and_its_answer_is_not() -> None:
    assert retryable(failure(grpc.StatusCode.UNAVAILABLE))  # a reset, a refused connection
    assert not retryable(failure(grpc.StatusCode.UNAVAILABLE, (ANSWERED, "1")))
    for code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
                 grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.INTERNAL):  # fmt: skip
        assert not retryable(failure(code))


class Attempts:
    """Fails with ``errors`` in turn, then answers."""

    def __init__(self, *errors: grpc.aio.AioRpcError) -> None:
        self.errors, self.calls = list(errors), 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "answer"


async def test_a_request_that_met_a_replica_going_away_is_retried_up_to_envoys_count() -> None:
    counted: list[str] = []
    attempts = Attempts(failure(grpc.StatusCode.UNAVAILABLE))
    assert await RetryBudget().call(attempts, counted.append) == "answer"
    assert attempts.calls == 2 and counted == [RETRIED]
    always = Attempts(*[failure(grpc.StatusCode.UNAVAILABLE)] * (capacity.HOP_RETRIES + 1))
    budget = RetryBudget()
    with pytest.raises(grpc.aio.AioRpcError):
        await budget.call(always, lambda _: None)
    assert always.calls == 1 + capacity.HOP_RETRIES  # and no more
    assert budget.requests == 0 and budget.retries == 0


def test_each_retry_waits_a_jittered_back_off_growing_to_a_cap() -> None:
    for retry in range(1, 6):
        ceiling = min((2**retry - 1) * capacity.RETRY_BACK_OFF_S, capacity.RETRY_BACK_OFF_MAX_S)
        waits = [back_off(retry) for _ in range(200)]
        assert all(0 <= wait <= ceiling for wait in waits), retry
        assert max(waits) > ceiling / 2 and min(waits) < ceiling / 2  # spread, not fixed


async def test_a_retrying_request_holds_one_of_the_budgets_retries() -> None:
    budget = RetryBudget(percent=0, min_concurrency=1)
    twice = Attempts(failure(grpc.StatusCode.UNAVAILABLE), failure(grpc.StatusCode.UNAVAILABLE))
    retried_once = asyncio.Event()
    retrying = asyncio.create_task(budget.call(twice, lambda _: retried_once.set()))
    await retried_once.wait()
    refused: list[str] = []
    with pytest.raises(grpc.aio.AioRpcError):  # the one retry the budget has is taken
        await budget.call(Attempts(failure(grpc.StatusCode.UNAVAILABLE)), refused.append)
    assert refused == [REFUSED]
    assert await retrying == "answer"
    assert budget.retries == 0 and budget.requests == 0


async def test_what_is_not_retryable_fails_at_once() -> None:
    relayed = Attempts(failure(grpc.StatusCode.UNAVAILABLE, (ANSWERED, "1")))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await RetryBudget().call(relayed, lambda _: None)
    assert relayed.calls == 1 and raised.value.code() == grpc.StatusCode.UNAVAILABLE


def test_the_budget_is_a_share_of_the_requests_in_flight_with_a_floor() -> None:
    budget = RetryBudget(percent=20, min_concurrency=2)
    budget.requests, budget.retries = 5, 1
    assert budget.allows()  # 1 < max(2, 1)
    budget.retries = 2
    assert not budget.allows()
    budget.requests = 20  # 20 % of 20 is 4
    assert budget.allows()
    budget.retries = 4
    assert not budget.allows()
    assert RetryBudget().percent == capacity.RETRY_BUDGET_PERCENT


async def test_an_exhausted_budget_passes_the_failure_up() -> None:
    budget = RetryBudget(percent=0, min_concurrency=0)
    attempts = Attempts(failure(grpc.StatusCode.UNAVAILABLE))
    counted: list[str] = []
    with pytest.raises(grpc.aio.AioRpcError):
        await budget.call(attempts, counted.append)
    assert attempts.calls == 1 and counted == [REFUSED]
    assert budget.requests == 0 and budget.retries == 0


async def test_a_hop_through_envoy_never_retries_itself() -> None:
    assert dial.retry_budget("127.0.0.1:8082") is None
    assert isinstance(dial.retry_budget("xds:///batcher"), RetryBudget)
    attempts = Attempts(failure(grpc.StatusCode.UNAVAILABLE))
    with pytest.raises(grpc.aio.AioRpcError):
        await retried(None, attempts, lambda _: None)
    assert attempts.calls == 1


class Failing:
    @grpc_boundary
    async def own(self, request: bytes, context: Any) -> bytes:
        raise InferError(grpc.StatusCode.UNAVAILABLE, "this replica is stopping")

    @grpc_boundary
    async def relayed(self, request: bytes, context: Any) -> bytes:
        raise from_upstream(failure(grpc.StatusCode.UNAVAILABLE), "the pool")


@pytest.fixture
async def server() -> AsyncIterator[str]:
    failing = Failing()
    handlers = {
        "Own": grpc.unary_unary_rpc_method_handler(failing.own),
        "Relayed": grpc.unary_unary_rpc_method_handler(failing.relayed),
    }
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def test_an_unavailable_a_server_answers_is_not_retried_one_it_never_sent_is(
    server: str,
) -> None:
    async with grpc.aio.insecure_channel(server) as channel:
        for method in ("Own", "Relayed"):  # its own refusal; one it passes up from below
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await channel.unary_unary(f"/{SERVICE}/{method}")(b"", timeout=10)
            assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
            assert not retryable(raised.value), method
    # nobody listens there: gRPC's own UNAVAILABLE, no replica's answer
    async with grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}") as gone:
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await gone.unary_unary(f"/{SERVICE}/Own")(b"", timeout=10)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE and retryable(raised.value)
