"""How long each stage of a request may take.

A request's budget starts when it arrives: the caller's remaining time when it set a deadline
(longer or shorter than the default, the caller's deadline wins), ``UPSTREAM_TIMEOUT_S`` when it
set none. Each stage (decoding, then inference) gets what is left when it starts. A stage is
never started with nothing left: :meth:`Budget.left` raises :class:`Expired` instead, so work
for a caller who has given up is never sent on (the service answers DEADLINE_EXCEEDED, naming
the stage, and counts it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


class Expired(Exception):
    """The deadline passed before ``stage`` could start."""

    def __init__(self, stage: str, overdue_s: float) -> None:
        super().__init__(
            f"the deadline passed {overdue_s * 1000:.1f} ms before {stage} could start; "
            f"the request was not sent to {stage}"
        )
        self.stage = stage


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

    def remaining(self) -> float:
        """Seconds left (zero or negative once the deadline has passed)."""
        return self.deadline - self.clock()

    def left(self, stage: str) -> float:
        """The timeout for ``stage``, starting now; raises :class:`Expired` if nothing is left."""
        remaining = self.remaining()
        if remaining <= 0:
            raise Expired(stage, -remaining)
        return remaining
