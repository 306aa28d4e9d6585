"""How long each stage of a request may take.

A request's budget starts when it arrives: the caller's remaining time when it set a deadline
(longer or shorter than the default, the caller's deadline wins), ``UPSTREAM_TIMEOUT_S`` when it
set none. Each stage (decoding, then inference) gets what is left when it starts, never less
than :data:`MIN_STAGE_S`: a stage is never called with a zero or negative timeout, so a request
whose time is up fails at the next hop with DEADLINE_EXCEEDED, naming that hop.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

MIN_STAGE_S = 0.001

Clock = Callable[[], float]


@dataclass(frozen=True)
class Budget:
    deadline: float  # on ``clock``'s time line
    clock: Clock = time.monotonic

    @classmethod
    def start(
        cls, caller_time_left: float | None, default_s: float, clock: Clock = time.monotonic
    ) -> Budget:
        """The budget of a request arriving now; ``caller_time_left`` is None without a deadline."""
        allowed = default_s if caller_time_left is None else caller_time_left
        return cls(clock() + allowed, clock)

    def left(self) -> float:
        """The timeout for a stage starting now: what is left, at least :data:`MIN_STAGE_S`."""
        return max(self.deadline - self.clock(), MIN_STAGE_S)
