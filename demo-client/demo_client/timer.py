"""The web view's timer: where a request's time goes, hop by hop, while the load runs.

The load's requests go through tritonclient, whose clients return no answer's metadata, so they
cannot say where their time went. Beside them the timer sends one image every
:data:`TIMER_EVERY_S` seconds (the run's images in turn) with :class:`~demo_client.timed.
TimedClassifier`, which reads the answer's ``Server-Timing``, and gives each request a W3C
``traceparent`` of its own with the sampled flag set: the pipeline honours a caller's sampled
flag at any sampling ratio, so every timed request is traced end to end wherever the servers
trace, under the trace id the page shows and links to. A timed request is not part of the load:
its latency goes to the dashboard only, never to the load's recorder. One that fails is counted
and said on the page; it never stops the load.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from tritonclient.utils import InferenceServerException

from demo_client.client import describe
from demo_client.timed import Timed
from demo_client.web_state import WebState

logger = logging.getLogger(__name__)

TIMER_EVERY_S = 0.5
TOP_K = 1  # the smallest answer: the timer wants its timing, not its classes


@dataclass(frozen=True)
class TraceContext:
    """A W3C trace context the client starts: its trace id (32 hex digits) and the id of the
    client's span (16), sampled."""

    trace_id: str
    span_id: str

    @property
    def traceparent(self) -> str:
        """The ``traceparent`` header: version 00, the ids, flags 01 (sampled)."""
        return f"00-{self.trace_id}-{self.span_id}-01"


def new_trace_context(token_hex: Callable[[int], str] = secrets.token_hex) -> TraceContext:
    """A fresh trace context with random ids (all zeros is invalid in W3C trace context, so
    never that)."""

    def nonzero(size: int) -> str:
        while True:
            value = token_hex(size)
            if value.strip("0"):
                return value

    return TraceContext(nonzero(16), nonzero(8))


class Classifier(Protocol):
    """What the timer calls: :class:`~demo_client.timed.TimedClassifier`."""

    async def classify(
        self, model: str, image: bytes, k: int, timeout_s: float, traceparent: str | None = None
    ) -> Timed: ...


@dataclass(frozen=True)
class Timer:
    """Times one of ``images`` at a time at ``model`` with ``classifier``, into ``dashboard``;
    ``elapsed`` gives the seconds into the run (the recorder's) and ``clock`` monotonic time."""

    classifier: Classifier
    model: str
    images: Sequence[bytes]
    timeout_s: float
    dashboard: WebState
    elapsed: Callable[[], float]
    every_s: float = TIMER_EVERY_S
    clock: Callable[[], float] = time.monotonic

    def __post_init__(self) -> None:
        if not self.images:
            raise ValueError("no images to time with")
        if not self.every_s > 0:
            raise ValueError("every_s must be positive")

    async def once(self, image: bytes) -> TraceContext:
        """One timed request with ``image``, recorded as answered or failed; its context."""
        context = new_trace_context()
        started = self.clock()
        try:
            answer = await self.classifier.classify(
                self.model, image, TOP_K, self.timeout_s, traceparent=context.traceparent
            )
        except InferenceServerException as exc:
            self._failed(describe(exc))
        except (
            Exception
        ) as exc:  # a timed request never stops the load: the page says what happened
            logger.debug("the timer failed", exc_info=True)
            self._failed(f"{type(exc).__name__}: {exc}")
        else:
            now = self.clock()
            total_ms = (now - started) * 1000.0
            self.dashboard.timed(now, self.elapsed(), context.trace_id, total_ms, answer.timing)
        return context

    def _failed(self, error: str) -> None:
        self.dashboard.timing_failed(self.clock(), self.elapsed(), error)

    async def run(self) -> None:
        """A timed request every ``every_s`` seconds (at once after one that took longer), the
        images in turn, until cancelled."""
        for n in itertools.count():
            started = self.clock()
            await self.once(self.images[n % len(self.images)])
            await asyncio.sleep(max(0.0, started + self.every_s - self.clock()))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Timer in the background while the block runs."""
        task = asyncio.create_task(self.run(), name="web-timer")
        try:
            yield
        finally:
            task.cancel()
            await asyncio.wait({task})
            if not task.cancelled() and (error := task.exception()) is not None:
                raise error  # a bug in the timer, not a failed request
