"""Latency and throughput bookkeeping for the load generator (pure: no gRPC, no I/O)."""

from __future__ import annotations

import time
from array import array
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

Clock = Callable[[], float]


@dataclass(frozen=True)
class Summary:
    """What a run did. Latency percentiles cover successful requests only; ``failed_p99_ms`` is
    how long the failed ones took to fail (a refusal should be fast)."""

    images: int
    requests: int
    errors: int
    images_per_s: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    duration_s: float
    concurrency: int
    batch: int
    errors_by_code: dict[str, int] = field(default_factory=dict)
    failed_p99_ms: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``None`` where there is no latency to report)."""
        return asdict(self)


def percentiles_ms(latencies_s: Sequence[float], qs: tuple[float, ...]) -> list[float | None]:
    """Percentiles (``qs`` in 0..100) of latencies in seconds, in milliseconds."""
    if not latencies_s:
        return [None for _ in qs]
    values = np.percentile(np.asarray(latencies_s, dtype=np.float64), qs)
    return [float(v) * 1000.0 for v in values]


class WindowRate:
    """Images per second over the last ``window_s`` seconds (for the live view)."""

    def __init__(self, window_s: float = 2.0) -> None:
        if window_s <= 0:
            raise ValueError("window_s must be positive")
        self.window_s = window_s
        self._events: deque[tuple[float, int]] = deque()
        self._total = 0

    def add(self, now: float, images: int) -> None:
        """Count ``images`` finished at time ``now`` (monotonic seconds)."""
        self._events.append((now, images))
        self._total += images
        self._expire(now)

    def rate(self, now: float, started: float | None = None) -> float:
        """Images/s in the window ending at ``now``; a younger run divides by its age."""
        self._expire(now)
        span = self.window_s
        if started is not None:
            span = min(span, now - started)
        return self._total / span if span > 0 else 0.0

    def _expire(self, now: float) -> None:
        horizon = now - self.window_s
        while self._events and self._events[0][0] <= horizon:
            _, images = self._events.popleft()
            self._total -= images


class Recorder:
    """Collects per-request outcomes of one run and summarises them."""

    def __init__(
        self,
        concurrency: int = 1,
        batch: int = 1,
        window_s: float = 2.0,
        clock: Clock = time.monotonic,
    ) -> None:
        self.concurrency = concurrency
        self.batch = batch
        self._clock = clock
        self._window = WindowRate(window_s)
        self._latencies = array("d")  # 8 bytes a request: long runs stay small
        self._late = array("d")
        self._failed = array("d")  # latency of failed requests whose latency is known
        self._errors: Counter[str] = Counter()
        self._images = 0
        self._started: float | None = None
        self._stopped: float | None = None

    def start(self) -> None:
        """Mark the start of the run (the first record starts it otherwise)."""
        if self._started is None:
            self._started = self._clock()

    def stop(self) -> None:
        """Mark the end of the run (of its measured window); later summaries use this as their
        end time. Requests sent inside the window may still be recorded after it."""
        if self._stopped is None:
            self._stopped = self._clock()

    def record_ok(self, latency_s: float, images: int) -> None:
        """A request that returned ``images`` results after ``latency_s`` seconds."""
        self.start()
        self._latencies.append(latency_s)
        self._images += images
        self._window.add(self._clock(), images)

    def record_error(self, code: str, latency_s: float | None = None) -> None:
        """A failed request, by gRPC status code name (``UNAVAILABLE``, …), and how long it took
        to fail when known."""
        self.start()
        self._errors[code] += 1
        if latency_s is not None:
            self._failed.append(latency_s)

    def record_late(self, late_s: float) -> None:
        """Open loop: a request went out ``late_s`` seconds after it was due (the generator
        fell behind, or every slot for a request in flight was taken)."""
        self._late.append(late_s)

    @property
    def late(self) -> int:
        """Requests that went out after they were due."""
        return len(self._late)

    def lateness_ms(self, q: float) -> float | None:
        """Percentile ``q`` (0..100) of how late the late requests went out, in milliseconds;
        ``None`` when none was late."""
        (value,) = percentiles_ms(self._late, (q,))
        return value

    @property
    def images(self) -> int:
        """Images classified successfully so far."""
        return self._images

    @property
    def errors(self) -> int:
        """Failed requests so far."""
        return sum(self._errors.values())

    @property
    def errors_by_code(self) -> dict[str, int]:
        """Failed requests by status code name, sorted by name."""
        return dict(sorted(self._errors.items()))

    @property
    def requests(self) -> int:
        """Finished requests so far, successful or not."""
        return len(self._latencies) + self.errors

    def elapsed(self) -> float:
        """Seconds since the start (until the stop, once stopped)."""
        if self._started is None:
            return 0.0
        end = self._stopped if self._stopped is not None else self._clock()
        return max(0.0, end - self._started)

    def rate_now(self) -> float:
        """Images/s over the sliding window."""
        now = self._stopped if self._stopped is not None else self._clock()
        return self._window.rate(now, self._started)

    def rate_average(self) -> float:
        """Images/s since the start."""
        elapsed = self.elapsed()
        return self._images / elapsed if elapsed > 0 else 0.0

    def percentiles_ms(self) -> tuple[float | None, float | None, float | None]:
        """p50, p95 and p99 latency of successful requests, in milliseconds."""
        p50, p95, p99 = percentiles_ms(self._latencies, (50.0, 95.0, 99.0))
        return p50, p95, p99

    def summary(self) -> Summary:
        """The run so far (or the whole run, once stopped)."""
        p50, p95, p99 = self.percentiles_ms()
        return Summary(
            images=self._images,
            requests=self.requests,
            errors=self.errors,
            images_per_s=self.rate_average(),
            p50_ms=p50,
            p95_ms=p95,
            p99_ms=p99,
            duration_s=self.elapsed(),
            concurrency=self.concurrency,
            batch=self.batch,
            errors_by_code=self.errors_by_code,
            failed_p99_ms=percentiles_ms(self._failed, (99.0,))[0],
        )
