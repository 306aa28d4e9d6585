"""Admission at the front: refuse at once, and cheaply, what the pipeline cannot finish in time.

Pure: no gRPC, the caller supplies the clock. A request is admitted when

* fewer than ``max_requests`` requests, and fewer than ``max_bytes`` of their bytes, are in
  flight (the hard bounds that keep memory bounded whatever the load), and
* its deadline leaves at least the fastest answer the pipeline has given a request no larger
  than it (else no load could make it in time: DEADLINE_EXCEEDED is the honest answer; a larger
  request's answer says nothing of a smaller one's, and one slow answer to a 64 MiB request
  must not refuse every ordinary request after it), and
* either fewer than ``floor`` requests are in flight, or the items in flight plus its own, at the
  throughput measured over the last ``window_s`` seconds, finish within ``target`` of the time
  its deadline leaves.

The second rule is what keeps goodput at capacity under overload: the work admitted is what the
pipeline completes before its callers give up, so nothing is done for a caller who is gone, and
queues (and latency) stay as short as the callers' deadlines allow. It adapts by itself: more
replicas downstream complete more items per second, so more is admitted. The measurement only
counts once ``floor`` requests are in flight, where the pipeline is busy enough for the rate it
completes to be its capacity rather than the demand; and it counts only the time spent so busy
(a busy clock), so a lull below the floor between two busy spells does not read as a slow
pipeline (the completions in the lull are not counted: counting its time would dilute the rate).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


class Overloaded(Exception):
    """The request is refused; the message says why, in figures. ``reason``: ``requests`` or
    ``bytes`` (a hard bound), ``load`` (what is in flight would not let it finish within its
    deadline) or ``deadline`` (its deadline is shorter than the fastest answer the pipeline has
    ever given a request no larger: the caller's deadline, not the load, is the problem)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Limits:
    max_requests: int
    max_bytes: int
    floor: int = 0  # below this many requests in flight, no estimate is consulted
    # The share of a deadline the estimated completion may use: headroom for the estimate's
    # error, and what bounds the recovery: the work admitted drains in about target x deadline.
    target: float = 0.6
    window_s: float = 2.0  # throughput is measured over this long
    names: tuple[str, str] = ("max_requests", "max_bytes")  # how a person sets the bounds

    def __post_init__(self) -> None:
        if self.max_requests < 1 or self.max_bytes < 1:
            raise ValueError("max_requests and max_bytes must be positive")
        if not 0 < self.target <= 1 or self.window_s <= 0 or self.floor < 0:
            raise ValueError("target must be in (0, 1], window_s > 0, floor >= 0")


@dataclass(eq=False)
class Ticket:
    items: int
    nbytes: int
    admitted: float  # on the admission's clock


class Admission:
    def __init__(self, limits: Limits, clock: Clock = time.monotonic) -> None:
        self.limits, self.clock = limits, clock
        self.requests = 0
        self.items = 0
        self.bytes = 0
        # The busy clock: seconds spent with at least max(floor, 1) requests in flight.
        self._busy_s = 0.0  # busy seconds before the present spell
        self._busy_from: float | None = None  # when the present busy spell began (None: not busy)
        self._idle_from: float | None = None  # when the last busy spell ended
        self._done: deque[tuple[float, int]] = deque()  # (busy clock, items) done in the window
        self._done_items = 0
        self._since: float | None = None  # the busy clock when the measurement began
        # The quickest answer so far, seconds, by request size: bytes to the next power of two.
        self._fastest: dict[int, float] = {}

    def rate(self) -> float | None:
        """Items completed per second while busy, over the window; None until ``floor`` items
        (at least one) completed: too little to say what the pipeline can do."""
        now = self._busy_clock(self.clock())
        self._trim(now)
        if self._done_items < max(self.limits.floor, 1) or self._since is None:
            return None
        span = min(self.limits.window_s, now - self._since)
        return self._done_items / max(span, self.limits.window_s / 8)

    def _busy_clock(self, now: float) -> float:
        """Busy seconds so far; a measurement is forgotten once idle for longer than the window
        (the pipeline may have changed since, and it says nothing of now)."""
        if self._busy_from is not None:
            return self._busy_s + now - self._busy_from
        if self._idle_from is not None and now - self._idle_from > self.limits.window_s:
            self._done.clear()
            self._done_items = 0
            self._since = self._idle_from = None
        return self._busy_s

    def admit(self, items: int, nbytes: int, time_left: float) -> Ticket:
        """A ticket for a request of ``items`` items and ``nbytes`` bytes, whose deadline leaves
        ``time_left`` seconds; raises :class:`Overloaded` saying why not."""
        limits = self.limits
        if self.requests >= limits.max_requests:
            raise Overloaded(
                "requests",
                f"overloaded: {self.requests} requests are in flight, the most this server "
                f"admits ({limits.names[0]}={limits.max_requests}); retry later or add replicas",
            )
        if self.bytes + nbytes > limits.max_bytes and self.requests:
            raise Overloaded(
                "bytes",
                f"overloaded: {self.bytes + nbytes} bytes would be in flight, more than this "
                f"server admits ({limits.names[1]}={limits.max_bytes}); retry later",
            )
        fastest = self.fastest(nbytes) if items else None
        if fastest is not None and time_left < fastest:
            raise Overloaded(
                "deadline",
                f"the deadline leaves {time_left * 1000:.0f} ms, less than the fastest answer "
                f"this pipeline has given a request of its size ({fastest * 1000:.0f} ms): allow "
                "a longer deadline",
            )
        if items and self.requests >= limits.floor:
            self._check_time(items, time_left)
        self.requests += 1
        self.items += items
        self.bytes += nbytes
        now = self.clock()
        if self.requests == max(limits.floor, 1):  # busy from now: the busy clock runs
            busy = self._busy_clock(now)
            self._busy_from = now
            if self._since is None:
                self._since = busy
        return Ticket(items, nbytes, now)

    def fastest(self, nbytes: int) -> float | None:
        """The quickest answer to a request of at most about ``nbytes`` bytes (its size rounded
        up to a power of two); None before the first."""
        size = nbytes.bit_length()
        return min((took for s, took in self._fastest.items() if s <= size), default=None)

    def _check_time(self, items: int, time_left: float) -> None:
        rate = self.rate()
        if rate is None:
            return
        allowed = self.limits.target * time_left
        needed = (self.items + items) / rate
        if needed <= allowed:
            return
        raise Overloaded(
            "load",
            f"overloaded: {self.items} items in flight at the measured {rate:.0f} items/s would "
            f"take {needed:.2f} s with this request's; its deadline leaves {time_left:.2f} s. "
            "Retry later or add replicas",
        )

    def release(self, ticket: Ticket, completed: bool) -> None:
        """The request is over; ``completed``: it was answered, and its items count as done."""
        now = self.clock()
        if completed and ticket.items:
            took = now - ticket.admitted
            size = ticket.nbytes.bit_length()
            self._fastest[size] = min(took, self._fastest.get(size, took))
            if self._busy_from is not None:  # done while busy: what the pipeline can do
                busy = self._busy_clock(now)
                self._done.append((busy, ticket.items))
                self._done_items += ticket.items
                self._trim(busy)
        self.requests -= 1
        self.items -= ticket.items
        self.bytes -= ticket.nbytes
        if self._busy_from is not None and self.requests < max(self.limits.floor, 1):
            self._busy_s = self._busy_clock(now)  # the busy spell ends: its clock stops
            self._busy_from, self._idle_from = None, now

    def _trim(self, busy: float) -> None:
        start = busy - self.limits.window_s
        while self._done and self._done[0][0] <= start:
            self._done_items -= self._done.popleft()[1]
        if self._since is not None and self._since < start:
            self._since = start
