"""Wait for an event, polled with a deadline: the tests' and benchmarks' one way to wait.

A condition is checked, not slept on: the wait ends as soon as it holds, and a generous
timeout only bounds how long a broken run takes to fail (with a message saying what was
awaited and what was last seen).

* :func:`wait_for`: an async check (an RPC, Envoy's admin API), from async code;
* :func:`wait_for_state`: a synchronous check (in-process state, a counter, a metric), from
  async code, so that the event loop it watches keeps running between checks;
* :func:`wait_until`: a synchronous check, from synchronous code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

POLL_S = 0.05

Abort = Callable[[], str | None]


async def wait_for(
    check: Callable[[], Awaitable[T]],
    timeout_s: float,
    what: str,
    *,
    abort: Abort | None = None,
) -> T:
    """Await ``check()`` until it returns something truthy; return that.

    ``abort()`` returning a message ends the wait early (a process it depends on exited).
    Raises TimeoutError naming ``what`` and the last value seen.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        value = await check()
        if value:
            return value
        if abort is not None and (reason := abort()) is not None:
            raise RuntimeError(f"gave up waiting for {what}: {reason}")
        if loop.time() > deadline:
            raise TimeoutError(f"{what}: not after {timeout_s:g} s (last seen: {value!r})")
        await asyncio.sleep(POLL_S)


async def wait_for_state(
    check: Callable[[], T],
    timeout_s: float,
    what: str,
    *,
    abort: Abort | None = None,
) -> T:
    """:func:`wait_for` for a synchronous ``check``, from async code."""

    async def checked() -> T:
        return check()

    return await wait_for(checked, timeout_s, what, abort=abort)


def wait_until(
    check: Callable[[], T], timeout_s: float, what: str, *, abort: Abort | None = None
) -> T:
    """:func:`wait_for` for a synchronous ``check``, from synchronous code."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if abort is not None and (reason := abort()) is not None:
            raise RuntimeError(f"gave up waiting for {what}: {reason}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout_s:g} s (last seen: {value!r})")
        time.sleep(POLL_S)
