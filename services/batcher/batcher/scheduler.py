"""Runs the pure queue on asyncio: a future per caller, a timer per model, the in-flight limit.

Event driven, no polling task: an arrival, a timer (a group's ``max_queue_delay`` or a request's
deadline) and a batch coming back each call ``pump``, which expires what is overdue and sends
every ready batch for which an in-flight slot (:mod:`batcher.inflight`) is free. One upstream
call per batch; each caller gets its own slice of the answer, or the batch's error. A caller
that goes away leaves its batch without touching its batch-mates.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Protocol

import grpc
from google.protobuf.message import DecodeError
from opentelemetry import trace

from batcher.batching import Request, Response, SplitError, merge, plan, split
from batcher.inflight import DRIFT, InFlight, expected
from batcher.metrics import ModelMetrics
from batcher.queueing import EPSILON, BatchQueue, Entry, QueueFull
from inferline import timing, tracing
from inferline.errors import InferError

logger = logging.getLogger(__name__)


class Upstream(Protocol):
    name: str

    async def infer(self, request: bytes, time_left: float) -> bytes: ...

    async def max_batch_size(self, model: str, version: str, time_left: float) -> int: ...


@dataclass(frozen=True)
class Settings:
    max_batch_size: int  # 0: what the upstream's model config says
    max_queue_delay_s: float
    max_queue: int
    default_timeout_s: float
    max_queue_bytes: int | None = None
    max_batch_bytes: int | None = None  # what one upstream message may carry


@dataclass(eq=False)
class Pending:
    request: Request
    raw: bytes
    future: asyncio.Future[bytes]
    batch: Batch | None = None
    span: trace.Span | None = None  # the caller's span, when tracing is on: its batch links it
    # Its queue and batch times and what the upstream measured of the batch (inferline.timing)
    timing: list[timing.Entry] = field(default_factory=list)


@dataclass(eq=False)
class Batch:
    entries: list[Entry[Pending]]
    task: asyncio.Task[None] | None = field(default=None, repr=False)
    crowded: bool = False  # sent into the last free slot
    holds_slot: bool = True  # its in-flight slot is not given back yet


class ModelBatcher:
    """Batches the ModelInfer calls of one model (and version)."""

    def __init__(
        self,
        model: str,
        max_batch_size: int,
        settings: Settings,
        inflight: InFlight,
        upstream: Upstream,
    ) -> None:
        self.model = model
        self.max_batch_size = max_batch_size
        self.settings = settings
        self.inflight = inflight
        self.upstream = upstream
        self.metrics = ModelMetrics(model)
        self.queue: BatchQueue[Pending] = BatchQueue(
            max_batch_size,
            settings.max_queue_delay_s,
            settings.max_queue,
            settings.max_queue_bytes,
            settings.max_batch_bytes,
        )
        # The fastest answered upstream call seen (drifting up), by batch size. While calls are
        # in flight, a request whose deadline leaves less than the fastest of all is not sent:
        # no answer could come in time. A bound from below, not an average: one slow call (a
        # 64 MiB request) must not make the batcher refuse the requests after it.
        self.fastest_s: dict[int, float] = {}
        self._loop = asyncio.get_running_loop()
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        inflight.register(self.pump)

    async def infer(self, request: Request, raw: bytes, deadline: float | None) -> bytes:
        """The serialized answer to ``request`` (``raw`` is how it arrived); raises InferError."""
        now = self._loop.time()
        if deadline is not None and deadline <= now:
            self.metrics.expired.inc()
            raise InferError(
                grpc.StatusCode.DEADLINE_EXCEEDED, "the deadline had passed when the request came"
            )
        batch_plan = plan(request, self.max_batch_size)
        if batch_plan.key is None:
            logger.debug("%s: request %r goes alone: %s", self.model, request.id, batch_plan.reason)
        pending = Pending(request, raw, self._loop.create_future())
        if tracing.is_on():
            pending.span = trace.get_current_span()
        entry = Entry(batch_plan.key, batch_plan.items, now, deadline, pending, len(raw))
        try:
            self.queue.push(entry)
        except QueueFull as exc:
            self.metrics.rejected.inc()
            setting = "MAX_QUEUE" if exc.unit == "requests" else "MAX_QUEUE_BYTES"
            raise InferError(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"batcher queue of model {self.model!r} is full: {exc} "
                f"(limit INFERLINE_BATCHER_{setting}={exc.limit}); retry later or add capacity",
            ) from None
        try:
            own = self.pump(entry)
            if own is not None:  # alone and sent at once: call upstream from this task
                await self._send(own)
            answer = await pending.future
            timing.extend(pending.timing)
            return answer
        except asyncio.CancelledError:
            self._leave(entry)
            raise

    def pump(self, caller: Entry[Pending] | None = None) -> Batch | None:
        """Expire overdue requests, send every ready batch a slot allows, re-arm the timer.

        A batch that is ``caller``'s request alone is returned instead of sent: the caller's
        task sends it, which saves a task and a turn of the event loop on the lightest path.
        """
        own = None
        now = self._loop.time()
        # While nothing is in flight a request is sent however little time it has: the call
        # costs no one a slot, and it keeps a stale figure from refusing every request forever.
        fastest = self.fastest_call_s if self.inflight.used else 0.0
        for entry in self.queue.expire(now, fastest):
            self.metrics.expired.inc()
            waited = now - entry.arrived
            left = (entry.deadline or now) - now
            why = (
                "deadline passed"
                if left <= EPSILON
                else f"{left * 1000:.1f} ms were left, less than the fastest upstream call "
                f"({fastest * 1000:.1f} ms),"
            )
            _fail(
                entry,
                InferError(
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"{why} after {waited * 1000:.1f} ms in the batcher queue of model "
                    f"{self.model!r}; the request was not sent upstream",
                ),
            )
        while self.inflight.free() > 0:
            entries = self.queue.pop_ready(now)
            if entries is None:
                break
            spawn = entries != [caller]
            batch = self._dispatch(entries, now, spawn)
            if not spawn:
                own = batch
        self.metrics.queue_depth.set(len(self.queue))
        self._arm(now, fastest)
        return own

    @property
    def fastest_call_s(self) -> float:
        """The fastest answered upstream call seen, of any batch size (0 before the first)."""
        return min(self.fastest_s.values(), default=0.0)

    async def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- internals ---------------------------------------------------------------------------

    def _arm(self, now: float, slack: float) -> None:
        due = self.queue.next_due(now, slack)
        if due is None:
            return
        if self._timer is not None:
            if self._timer.when() <= due:
                return
            self._timer.cancel()
        self._timer = self._loop.call_at(due, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.pump()

    def _dispatch(self, entries: list[Entry[Pending]], now: float, spawn: bool) -> Batch:
        batch = Batch(entries, crowded=self.inflight.take())
        for entry in entries:
            entry.payload.batch = batch
            self.metrics.queue_delay.observe(now - entry.arrived)
            if entry.payload.span is not None:  # tracing on
                entry.payload.span.set_attributes(
                    {
                        "inferline.batch.items": sum(e.items for e in entries),
                        "inferline.batch.requests": len(entries),
                        "inferline.queue.ms": round((now - entry.arrived) * 1000, 3),
                    }
                )
        if spawn:
            task = self._loop.create_task(self._send(batch))
            batch.task = task
            self._tasks.add(task)
            task.add_done_callback(lambda task: self._sent(task, batch))
        return batch

    def _sent(self, task: asyncio.Task[None], batch: Batch) -> None:
        self._tasks.discard(task)
        # A task cancelled before its first step never ran _send's ``finally`` (every caller
        # left before it started): its slot is given back here, or it would be lost for good.
        self._release(batch)
        if not task.cancelled() and (error := task.exception()) is not None:
            logger.error("%s: a batch failed unexpectedly", self.model, exc_info=error)

    def _release(self, batch: Batch) -> None:
        """Give ``batch``'s in-flight slot back, once."""
        if batch.holds_slot:
            batch.holds_slot = False
            self.inflight.give_back()

    async def _send(self, batch: Batch) -> None:
        entries = [e for e in batch.entries if not e.payload.future.done()]
        start = self._loop.time()
        self.metrics.in_flight.inc()
        try:
            if entries and tracing.is_on():
                links = [tracing.link_of(e.payload.span) for e in entries]
                items = sum(e.items for e in entries)
                attributes = {
                    "inferline.model": self.model,
                    "inferline.batch.items": items,
                    "inferline.batch.requests": len(entries),
                }
                with tracing.batch_span(f"batch {self.model}", links, attributes):
                    await self._call(entries, start, batch.crowded)
            elif entries:
                await self._call(entries, start, batch.crowded)
        except asyncio.CancelledError:
            for entry in entries:
                entry.payload.future.cancel()  # nobody waits for these any more
            raise
        finally:
            self.metrics.in_flight.dec()
            if entries:
                self.metrics.upstream_duration.observe(self._loop.time() - start)
            for entry in entries:  # only after a bug: callers must never wait forever
                _fail(entry, InferError(grpc.StatusCode.INTERNAL, "the batch failed; see the log"))
            self._release(batch)

    async def _call(self, entries: list[Entry[Pending]], now: float, crowded: bool) -> None:
        # The batch may take as long as its most patient caller allows: a caller with a tighter
        # deadline gets DEADLINE_EXCEEDED from its own call, never its batch-mates.
        deadlines = [e.deadline - now for e in entries if e.deadline is not None]
        if len(deadlines) < len(entries):
            deadlines.append(self.settings.default_timeout_s)
        timeout = max(max(deadlines), EPSILON)
        items = sum(e.items for e in entries)
        self.metrics.batch_size.observe(items)
        self.metrics.batch_requests.observe(len(entries))
        try:
            if len(entries) == 1:  # alone: forward the bytes as they came, answer as it comes
                answer, below = await self._infer(entries[0].payload.raw, timeout)
                answers = [answer]
            else:
                merged = merge(
                    [e.payload.request for e in entries], [e.payload.raw for e in entries]
                )
                answer, below = await self._infer(merged, timeout)
                reply = Response.FromString(answer)
                sizes = [e.items for e in entries]
                parts = split(reply, sizes, [e.payload.request.id for e in entries])
                answers = [part.SerializeToString() for part in parts]
        except InferError as exc:
            for entry in entries:
                self.metrics.failed(exc.code.name)
                _fail(entry, exc)
            return
        except (SplitError, DecodeError) as exc:
            error = InferError(
                grpc.StatusCode.INTERNAL,
                f"{self.upstream.name} answered a batch of {items} items that cannot be split "
                f"back: {exc}",
            )
            for entry in entries:
                self.metrics.failed(error.code.name)
                _fail(entry, error)
            return
        # Answered calls only: a call that timed out says nothing of how long an answer takes,
        # and would hold back every later request until another call came through.
        took = self._loop.time() - now
        for size in self.fastest_s:
            self.fastest_s[size] *= 1 + DRIFT
        self.fastest_s[items] = min(took, self.fastest_s.get(items, took))
        self.inflight.feedback(took, expected(self.fastest_s, items), crowded)
        self.metrics.inflight_limit.set(self.inflight.limit)
        for entry, answer in zip(entries, answers, strict=True):
            if not entry.payload.future.done():
                queued = (now - entry.arrived) * 1000
                entry.payload.timing = [("queue", queued), ("batch", took * 1000), *below]
                entry.payload.future.set_result(answer)

    async def _infer(self, request: bytes, time_left: float) -> tuple[bytes, list[timing.Entry]]:
        """The upstream's answer, and what it measured (its server timing) of the batch."""
        with timing.collecting() as below:  # the batch's own: not a caller's it was spawned from
            return await self.upstream.infer(request, time_left), below

    def _leave(self, entry: Entry[Pending]) -> None:
        """The caller of ``entry`` went away (cancelled, or its deadline ended the call)."""
        overdue = entry.deadline is not None and self._loop.time() + EPSILON >= entry.deadline
        if self.queue.discard(entry):
            (self.metrics.expired if overdue else self.metrics.cancelled).inc()
            self.metrics.queue_depth.set(len(self.queue))
            self.pump()  # its group may have a new head, or be gone
            return
        if not overdue:
            self.metrics.cancelled.inc()
        batch = entry.payload.batch
        if (
            batch is not None
            and batch.task is not None
            and all(e.payload.future.cancelled() for e in batch.entries)
        ):
            batch.task.cancel()  # nobody is left to answer: stop the upstream call


def _fail(entry: Entry[Pending], error: InferError) -> None:
    if not entry.payload.future.done():
        entry.payload.future.set_exception(error)
