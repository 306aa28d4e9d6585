"""Retries, on another replica, for a hop dialled proxyless (gRPC's own xDS client).

Through Envoy, an inner hop's retries are Envoy's: a request that met a replica going away (a
reset, a refused connection or stream) is retried on another host, within a budget, and an
error a replica answered is passed up as it is (inferline_envoy.params' RETRY_ON_HOP). A hop
dialled proxyless (middleman to the batchers) has no Envoy, so its client does the same here,
and nothing else retries it (one layer retries):

* what is retried: UNAVAILABLE that no replica answered. Every error a service answers carries
  the trailing metadata :data:`inferline.errors.ANSWERED`; gRPC's own UNAVAILABLE for a reset
  or a refused connection or stream carries none.
* the budget: retries in flight stay within :data:`~inferline.capacity.RETRY_BUDGET_PERCENT`
  of the requests in flight, and at least :data:`~inferline.capacity.MIN_RETRY_CONCURRENCY`
  (Envoy's retry budget, the same figures), so a failing pool sees a bounded share of extra
  attempts;
* how often: up to :data:`~inferline.capacity.HOP_RETRIES` retries, each after Envoy's fully
  jittered exponential back-off (:func:`back_off`), all within the request's deadline.

gRPC retries a call that never left the client on its own (A6 transparent retries), and its
balancer skips a replica whose connection failed once it has seen it fail: what is left here is
the call in flight when its replica died or hung (a keepalive PING it did not answer closes the
connection), and a retry that met the same replica before its balancer saw it go (Envoy skips
the hosts a request already tried; gRPC cannot be told to, so the back-off gives it the time).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import grpc

from inferline import capacity
from inferline.errors import ANSWERED

T = TypeVar("T")
Count = Callable[[str], object]  # told RETRIED or REFUSED: a counter's label
RETRIED, REFUSED = "retried", "refused"  # a retry made; one the budget refused


def retryable(error: grpc.aio.AioRpcError) -> bool:
    """Whether ``error`` is a replica that went away (retry it on another), not its answer."""
    if error.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    return not any(key == ANSWERED for key, _ in error.trailing_metadata() or ())


def back_off(retry: int) -> float:
    """Seconds before the ``retry``-th retry (from 1): Envoy's fully jittered exponential
    back-off, uniform up to (2^retry - 1) x the base, at most the cap."""
    ceiling = min((2**retry - 1) * capacity.RETRY_BACK_OFF_S, capacity.RETRY_BACK_OFF_MAX_S)
    return random.uniform(0.0, ceiling)


class RetryBudget:
    """Retries in flight at most ``percent`` % of the requests in flight (at least
    ``min_concurrency``)."""

    def __init__(
        self,
        percent: float = capacity.RETRY_BUDGET_PERCENT,
        min_concurrency: int = capacity.MIN_RETRY_CONCURRENCY,
        retries_per_request: int = capacity.HOP_RETRIES,
    ) -> None:
        self.percent, self.min_concurrency = percent, min_concurrency
        self.retries_per_request = retries_per_request
        self.requests = 0
        self.retries = 0

    def allows(self) -> bool:
        return self.retries < max(self.min_concurrency, self.requests * self.percent / 100)

    async def call(self, attempt: Callable[[], Awaitable[T]], count: Count) -> T:
        """``attempt()``, again while it fails :func:`retryable`, up to ``retries_per_request``
        more times, each after :func:`back_off`; otherwise its error as it is. A request that
        is retrying holds one of the budget's retries until it ends; one the budget refuses
        fails at once. ``count`` is told each retry, ``"retried"``, and each refusal,
        ``"refused"`` (a metric's label)."""
        self.requests += 1
        retry = 0
        try:
            while True:
                try:
                    return await attempt()
                except grpc.aio.AioRpcError as error:
                    if not retryable(error) or retry == self.retries_per_request:
                        raise
                    if retry == 0 and not self.allows():
                        count(REFUSED)
                        raise
                if retry == 0:
                    self.retries += 1
                retry += 1
                count(RETRIED)
                await asyncio.sleep(back_off(retry))
        finally:
            self.requests -= 1
            if retry:
                self.retries -= 1


async def retried(
    budget: RetryBudget | None, attempt: Callable[[], Awaitable[T]], count: Count
) -> T:
    """``attempt()`` retried within ``budget`` (None: a hop through Envoy, which retries it)."""
    if budget is None:
        return await attempt()
    return await budget.call(attempt, count)
