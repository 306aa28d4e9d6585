"""The queue's rules over random arrival orders, sizes, keys and deadlines (explicit clock)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from batcher.inflight import InFlight, expected
from batcher.queueing import BatchQueue, Entry, QueueFull

Arrival = tuple[str | None, int, float, float | None]  # key, items, gap before it, deadline in


@st.composite
def arrivals(draw: Any) -> list[Arrival]:
    drawn: list[Arrival] = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["a", "b", "c", None]),
                st.integers(1, 5),
                st.sampled_from([0.0, 0.0, 0.001, 0.004, 0.02]),
                st.sampled_from([None, None, 0.003, 0.05]),
            ),
            min_size=1,
            max_size=40,
        )
    )
    return drawn


@settings(max_examples=300, deadline=None)
@given(
    events=arrivals(),
    max_batch=st.integers(1, 8),
    delay=st.sampled_from([0.0, 0.002, 0.01]),
)
def test_batches_follow_the_rules(events: list[Arrival], max_batch: int, delay: float) -> None:
    queue: BatchQueue[int] = BatchQueue(max_batch, delay, max_queue=1000)
    pending: list[Entry[int]] = []
    sent: list[Entry[int]] = []
    expired: list[Entry[int]] = []

    def pump(now: float) -> None:
        for entry in queue.expire(now):
            assert entry.deadline is not None and now >= entry.deadline - 1e-6
            expired.append(entry)
            pending.remove(entry)
        while (batch := queue.pop_ready(now)) is not None:
            key = batch[0].key
            group = [e for e in pending if e.key == key and key is not None] or batch
            assert batch == group[: len(batch)]  # the oldest of its key, in arrival order
            assert len({e.key for e in batch}) == 1
            assert sum(e.items for e in batch) <= max_batch or len(batch) == 1
            assert key is not None or len(batch) == 1  # no key: alone
            # Sent only when full, when the head waited max_queue_delay, or alone.
            full = sum(e.items for e in group) >= max_batch
            assert key is None or full or now - batch[0].arrived >= delay - 1e-6
            for entry in batch:
                assert entry.deadline is None or now < entry.deadline + 1e-6
                pending.remove(entry)
                sent.append(entry)
        # Nothing that is ready is left waiting (the timer is armed for what comes next).
        for key in {e.key for e in pending}:
            group = [e for e in pending if e.key == key]
            assert sum(e.items for e in group) < max_batch
            assert now - group[0].arrived < delay + 1e-6
        due = queue.next_due(now)
        assert (due is None) == (len(queue) == 0) and len(queue) == len(pending)
        assert due is None or due > now

    now = 0.0
    for index, (key, items, gap, deadline_in) in enumerate(events):
        target = now + gap
        while now < target:  # time passes; the timer fires at each due time
            due = queue.next_due(now)
            now = min(target, due if due is not None else target)
            pump(now)
        deadline = None if deadline_in is None else now + deadline_in
        entry = Entry(key, items, now, deadline, index)
        queue.push(entry)
        pending.append(entry)
        pump(now)
    while len(queue):
        due = queue.next_due(now)
        assert due is not None
        now = due
        pump(now)

    # Every request leaves exactly once: in one batch, or expired.
    assert sorted(e.payload for e in sent + expired) == list(range(len(events)))
    for key in ("a", "b", "c"):  # within a key, arrival order is kept
        order = [e.payload for e in sent if e.key == key]
        assert order == sorted(order)


def test_full_group_goes_at_once_and_partial_waits_for_the_delay() -> None:
    queue: BatchQueue[str] = BatchQueue(max_batch_size=4, max_delay=0.01, max_queue=10)
    for name in "abc":
        queue.push(Entry("k", 1, 0.0, None, name))
    assert queue.pop_ready(0.0) is None
    assert queue.next_due(0.0) == pytest.approx(0.01)
    queue.push(Entry("k", 1, 0.001, None, "d"))
    assert [e.payload for e in queue.pop_ready(0.001) or []] == ["a", "b", "c", "d"]
    queue.push(Entry("k", 3, 0.002, None, "e"))
    queue.push(Entry("k", 2, 0.003, None, "f"))  # does not fit with e: e goes alone, full
    assert [e.payload for e in queue.pop_ready(0.003) or []] == ["e"]
    assert queue.pop_ready(0.003) is None
    assert [e.payload for e in queue.pop_ready(0.013) or []] == ["f"]
    assert len(queue) == 0 and queue.next_due(0.013) is None


def test_oldest_ready_group_goes_first_and_keyless_requests_go_alone() -> None:
    queue: BatchQueue[str] = BatchQueue(max_batch_size=8, max_delay=0.005, max_queue=10)
    queue.push(Entry("b", 1, 0.000, None, "b1"))
    queue.push(Entry("a", 1, 0.001, None, "a1"))
    queue.push(Entry(None, 1, 0.002, None, "alone"))
    assert [e.payload for e in queue.pop_ready(0.002) or []] == ["alone"]
    assert [e.payload for e in queue.pop_ready(0.006) or []] == ["b1"]
    assert [e.payload for e in queue.pop_ready(0.006) or []] == ["a1"]


def test_deadlines_expire_before_dispatch_and_wake_the_timer() -> None:
    queue: BatchQueue[str] = BatchQueue(max_batch_size=8, max_delay=1.0, max_queue=10)
    queue.push(Entry("k", 1, 0.0, 0.2, "short"))
    queue.push(Entry("k", 1, 0.0, None, "none"))
    assert queue.next_due(0.0) == pytest.approx(0.2)
    assert [e.payload for e in queue.expire(0.1)] == []
    assert [e.payload for e in queue.expire(0.2)] == ["short"]
    assert len(queue) == 1
    assert [e.payload for e in queue.pop_ready(1.0) or []] == ["none"]


def test_discard_and_queue_full() -> None:
    queue: BatchQueue[str] = BatchQueue(max_batch_size=8, max_delay=1.0, max_queue=2)
    first = Entry("k", 1, 0.0, 5.0, "first")
    queue.push(first)
    queue.push(Entry("k", 1, 0.0, None, "second"))
    with pytest.raises(QueueFull, match="2 requests are waiting") as raised:
        queue.push(Entry("k", 1, 0.0, None, "third"))
    assert raised.value.limit == 2
    assert queue.discard(first)
    assert not queue.discard(first)
    assert queue.expire(10.0) == []  # a discarded request does not expire later
    queue.push(Entry("k", 1, 0.0, None, "third"))
    assert [e.payload for e in queue.pop_ready(1.0) or []] == ["second", "third"]
    assert not queue.discard(first)


def test_dispatched_entries_do_not_pile_up_in_the_deadline_heap() -> None:
    queue: BatchQueue[int] = BatchQueue(max_batch_size=1, max_delay=0.0, max_queue=10)
    for i in range(10_000):
        queue.push(Entry("k", 1, float(i), float(i) + 30.0, i))
        assert queue.pop_ready(float(i)) is not None
    assert len(queue._deadlines) < 200


def test_a_request_the_upstream_cannot_answer_in_time_expires_before_its_deadline() -> None:
    # The upstream takes 0.3 s: a request with less than that left would be answered too late.
    queue: BatchQueue[str] = BatchQueue(max_batch_size=8, max_delay=10.0, max_queue=10)
    queue.push(Entry("k", 1, 0.0, 1.0, "soon"))
    queue.push(Entry("k", 1, 0.0, 5.0, "later"))
    assert queue.next_due(0.0, slack=0.3) == pytest.approx(0.7)  # the timer fires in time
    assert queue.expire(0.6, slack=0.3) == []
    assert [e.payload for e in queue.expire(0.7, slack=0.3)] == ["soon"]
    assert len(queue) == 1 and queue.next_due(0.7, slack=0.3) == pytest.approx(4.7)


def test_the_queue_is_bounded_in_bytes_but_a_lone_request_always_fits() -> None:
    queue: BatchQueue[str] = BatchQueue(
        max_batch_size=8, max_delay=1.0, max_queue=10, max_bytes=100
    )
    big = Entry("k", 1, 0.0, None, "big", nbytes=150)
    queue.push(big)  # alone: over the bound, but refusing it could never succeed later either
    with pytest.raises(QueueFull, match="would pass 100 bytes") as raised:
        queue.push(Entry("k", 1, 0.0, None, "small", nbytes=1))
    assert raised.value.unit == "bytes" and raised.value.limit == 100
    assert queue.discard(big) and queue.nbytes == 0
    for name in ("a", "b"):
        queue.push(Entry("k", 1, 0.0, None, name, nbytes=50))
    with pytest.raises(QueueFull):
        queue.push(Entry("k", 1, 0.0, None, "c", nbytes=1))
    assert [e.payload for e in queue.pop_ready(1.0) or []] == ["a", "b"]
    assert queue.nbytes == 0  # dispatched requests no longer count


def test_a_batch_merges_no_more_bytes_than_one_message_carries() -> None:
    """A request near the message limit goes with no batch-mates (together they would make a
    message no hop accepts, failing every one of them); small ones still fill a batch."""
    queue: BatchQueue[str] = BatchQueue(8, 0.0, 16, max_batch_bytes=100)
    for name, nbytes in (("small", 10), ("huge", 95), ("tiny", 1), ("more", 80), ("last", 5)):
        queue.push(Entry("k", 1, 0.0, None, name, nbytes=nbytes))
    batches = []
    while (batch := queue.pop_ready(1.0)) is not None:
        batches.append([e.payload for e in batch])
    assert batches == [["small"], ["huge", "tiny"], ["more", "last"]]
    alone: BatchQueue[str] = BatchQueue(8, 0.0, 16, max_batch_bytes=100)
    alone.push(Entry("k", 1, 0.0, None, "over", nbytes=150))  # itself over: still sent, alone
    assert [e.payload for e in alone.pop_ready(1.0) or []] == ["over"]


def test_the_adaptive_limit_gives_a_slot_up_when_batches_queue_and_takes_one_back_when_not() -> (
    None
):
    slots = InFlight(4, adaptive=True)
    slots.feedback(took_s=0.03, fastest_s=0.01, crowded=True)  # 3x the fastest: queued
    assert slots.limit == 3
    slots.feedback(took_s=0.011, fastest_s=0.01, crowded=False)  # fast, but not held back
    assert slots.limit == 3
    slots.feedback(took_s=0.011, fastest_s=0.01, crowded=True)  # fast while every slot was taken
    assert slots.limit == 4
    slots.feedback(took_s=0.011, fastest_s=0.01, crowded=True)
    assert slots.limit == 4  # never above the maximum
    for _ in range(10):
        slots.feedback(took_s=1.0, fastest_s=0.01, crowded=True)
    assert slots.limit == 1  # nor below one
    fixed = InFlight(4)
    fixed.feedback(took_s=1.0, fastest_s=0.01, crowded=True)
    assert fixed.limit == 4


def test_what_a_batch_takes_unqueued_comes_from_bigger_batches_and_smaller_ones_per_item() -> None:
    fastest = {1: 0.05, 8: 0.09}  # a GPU taking 45 ms + 5 ms per item
    assert expected(fastest, 1) == 0.05
    assert expected(fastest, 4) == 0.09  # no more than a batch of 8 took
    assert expected(fastest, 16) == pytest.approx(0.18)  # no more per item than 8 took
    assert expected({8: 0.09}, 1) == 0.09  # never the full batch's 11 ms per item
