"""The requests of one model waiting for a batch: bounded, deadline-aware, FIFO. Pure.

The caller supplies the clock (seconds, any monotonic origin), so the rules are tested directly:

* requests with the same key form a group; a request without a key is a group of its own;
* a group is *ready* when its items reach ``max_batch_size``, when its oldest request has waited
  ``max_delay``, or when it is a lone request;
* ``pop_ready`` takes, from the ready group whose head came first, requests in arrival order
  while they fit in ``max_batch_size`` (a request is never split across batches);
* a request whose deadline has passed, or would pass within ``slack`` (the time the upstream
  takes), is removed by ``expire`` and never dispatched;
* the queue is bounded in requests and, optionally, in bytes.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

# A timer may fire a hair early; treat "due within a microsecond" as due.
EPSILON = 1e-6


class QueueFull(Exception):
    """The queue holds ``limit`` requests, or would hold more than ``limit`` bytes (``unit``)."""

    def __init__(self, limit: int, unit: str = "requests") -> None:
        what = f"{limit} requests are waiting" if unit == "requests" else f"{limit} bytes"
        super().__init__(what if unit == "requests" else f"the waiting requests would pass {what}")
        self.limit = limit
        self.unit = unit


@dataclass(eq=False)
class Entry(Generic[T]):
    """One waiting request: its batch key (None: alone), items along dim 0, times, payload."""

    key: Hashable | None
    items: int
    arrived: float
    deadline: float | None
    payload: T
    nbytes: int = 0
    group: Hashable | None = field(default=None, repr=False)
    queued: bool = field(default=False, repr=False)


class BatchQueue(Generic[T]):
    def __init__(
        self,
        max_batch_size: int,
        max_delay: float,
        max_queue: int,
        max_bytes: int | None = None,
        max_batch_bytes: int | None = None,
    ) -> None:
        if max_queue < 1:
            raise ValueError(f"max_queue must be >= 1, got {max_queue}")
        self.max_batch_size = max(max_batch_size, 1)
        self.max_delay = max(max_delay, 0.0)
        self.max_queue = max_queue
        self.max_bytes = max_bytes
        # The most bytes of requests one batch merges (the upstream's message limit): a request
        # near it goes with no batch-mates, rather than make a message no hop accepts.
        self.max_batch_bytes = max_batch_bytes
        self.nbytes = 0  # of the waiting requests
        self._groups: dict[Hashable, deque[Entry[T]]] = {}
        self._items: dict[Hashable, int] = {}
        self._deadlines: list[tuple[float, int, Entry[T]]] = []  # lazy: skip entries not queued
        self._count = 0
        self._seq = itertools.count()

    def __len__(self) -> int:
        return self._count

    def push(self, entry: Entry[T]) -> None:
        """Queue ``entry``; raises QueueFull when ``max_queue`` requests already wait, or when
        its bytes would take the waiting ones past ``max_bytes`` (a lone request always fits)."""
        if self._count >= self.max_queue:
            raise QueueFull(self.max_queue)
        if (
            self.max_bytes is not None
            and self._count
            and self.nbytes + entry.nbytes > self.max_bytes
        ):
            raise QueueFull(self.max_bytes, "bytes")
        group = entry.key if entry.key is not None else _Alone(next(self._seq))
        self._groups.setdefault(group, deque()).append(entry)
        self._items[group] = self._items.get(group, 0) + entry.items
        entry.group = group
        entry.queued = True
        self._count += 1
        self.nbytes += entry.nbytes
        if entry.deadline is not None:
            heapq.heappush(self._deadlines, (entry.deadline, next(self._seq), entry))

    def discard(self, entry: Entry[T]) -> bool:
        """Remove ``entry`` if it is still waiting (its caller went away); True if it was."""
        if not entry.queued:
            return False
        self._groups[entry.group].remove(entry)
        self._forget(entry)
        self._drop_if_empty(entry.group)
        return True

    def expire(self, now: float, slack: float = 0.0) -> list[Entry[T]]:
        """Remove and return every waiting entry whose deadline is at or before ``now + slack``:
        with ``slack`` the time the upstream takes, those it could not answer in time."""
        expired: list[Entry[T]] = []
        while self._deadlines and self._deadlines[0][0] <= now + slack + EPSILON:
            _, _, entry = heapq.heappop(self._deadlines)
            if self.discard(entry):
                expired.append(entry)
        return expired

    def pop_ready(self, now: float) -> list[Entry[T]] | None:
        """The next batch (one group's head, in arrival order), or None if no group is ready."""
        chosen = None
        for group, entries in self._groups.items():
            if self._ready(group, entries, now) and (
                chosen is None or entries[0].arrived < self._groups[chosen][0].arrived
            ):
                chosen = group
        if chosen is None:
            return None
        entries = self._groups[chosen]
        batch = [entries.popleft()]
        total, size = batch[0].items, batch[0].nbytes
        limit = self.max_batch_bytes
        while (
            entries
            and total + entries[0].items <= self.max_batch_size
            and (limit is None or size + entries[0].nbytes <= limit)
        ):
            total += entries[0].items
            size += entries[0].nbytes
            batch.append(entries.popleft())
        for entry in batch:
            self._forget(entry)
        self._drop_if_empty(chosen)
        return batch

    def next_due(self, now: float, slack: float = 0.0) -> float | None:
        """When, without new arrivals, a group becomes ready or an entry expires (its deadline
        less ``slack``, as :meth:`expire` counts it), or None."""
        due = [
            entries[0].arrived + self.max_delay
            for group, entries in self._groups.items()
            if not self._ready(group, entries, now)
        ]
        while self._deadlines and not self._deadlines[0][2].queued:
            heapq.heappop(self._deadlines)  # already dispatched or discarded
        if self._deadlines:
            due.append(self._deadlines[0][0] - slack)
        return min(due, default=None)

    def _ready(self, group: Hashable, entries: deque[Entry[T]], now: float) -> bool:
        return (
            isinstance(group, _Alone)
            or self._items[group] >= self.max_batch_size
            or now + EPSILON >= entries[0].arrived + self.max_delay
        )

    def _forget(self, entry: Entry[T]) -> None:
        entry.queued = False
        self._count -= 1
        self.nbytes -= entry.nbytes
        self._items[entry.group] -= entry.items
        if len(self._deadlines) > 2 * self._count + 64:  # drop dispatched entries (and payloads)
            self._deadlines = [d for d in self._deadlines if d[2].queued]
            heapq.heapify(self._deadlines)

    def _drop_if_empty(self, group: Hashable) -> None:
        if not self._groups[group]:
            del self._groups[group]
            del self._items[group]


@dataclass(frozen=True)
class _Alone:
    """The group key of a request that travels alone."""

    seq: int
