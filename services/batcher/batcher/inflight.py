"""The in-flight limit: how many batches may be on their way to one upstream at once, shared
by every model, fixed or adapted to what the upstream's answer times show."""

from __future__ import annotations

from collections.abc import Callable, Mapping

# Adaptive in-flight limit: a batch whose upstream call took this many times what a batch of its
# size takes unqueued (:func:`expected`) queued there (one slot fewer); one within TOLERANCE of
# it, sent while every slot was taken, found room (one slot more). The fastest calls seen creep
# up by DRIFT a call, so they follow a slower upstream instead of holding the limit down.
QUEUED, TOLERANCE, DRIFT = 2.0, 1.25, 0.01


def expected(fastest: Mapping[int, float], items: int) -> float:
    """The most a batch of ``items`` takes unqueued, from the fastest call seen of each size: a
    GPU's time grows with the batch (no more than a bigger batch took) and its time per item
    falls (no more per item than a smaller batch took). A full batch's time per item says
    nothing of a small one: a small batch on an idle GPU is slower per item, not queued."""
    return min(t if size >= items else t * items / size for size, t in fastest.items())


class InFlight:
    """Batches in flight to one upstream, shared by every model; a freed slot wakes the models.

    Adaptive (``adaptive=True``), the limit moves between 1 and ``limit`` with what the upstream
    shows: behind a balancer the batcher does not know how many GPUs there are, and each batch
    sent beyond what they run at once only queues there, in smaller batches that each cost a
    call, a decode and a model launch. So a batch that took much longer than the fastest of its
    size takes a slot away, and one as fast as that, sent while every slot was taken, gives one
    back: with one GPU pod the limit settles near one or two and batches fill; as pods are
    added, calls stay fast and the limit climbs to keep them all busy."""

    def __init__(self, limit: int, adaptive: bool = False) -> None:
        self.maximum = self.limit = limit
        self.adaptive = adaptive
        self.used = 0
        self._pumps: list[Callable[[], object]] = []
        self._next = 0

    def free(self) -> int:
        return self.limit - self.used

    def register(self, pump: Callable[[], object]) -> None:
        self._pumps.append(pump)

    def take(self) -> bool:
        """Take a slot; whether that filled every one (the limit was what held batches back)."""
        self.used += 1
        return self.used >= self.limit

    def feedback(self, took_s: float, fastest_s: float, crowded: bool) -> None:
        """An answered batch's upstream time, against the fastest of its size (adaptive)."""
        if not self.adaptive:
            return
        if took_s > QUEUED * fastest_s and self.limit > 1:
            self.limit -= 1
        elif took_s <= TOLERANCE * fastest_s and crowded and self.limit < self.maximum:
            self.limit += 1

    def give_back(self) -> None:
        self.used -= 1
        count = len(self._pumps)
        for i in range(count):  # round robin, so no model starves another
            if self.free() <= 0:
                break
            self._pumps[(self._next + i) % count]()
        self._next = (self._next + 1) % max(count, 1)
