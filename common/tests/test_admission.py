"""Admission (pure): hard bounds on requests and bytes in flight, and refusal of what the measured
throughput says would not finish within its deadline, told apart from a deadline too short for
the pipeline at its working load."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inferline.admission import Admission, Limits, Overloaded, Ticket


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def finish(admission: Admission, clock: FakeClock, count: int, over_s: float, items: int) -> None:
    """``count`` requests of ``items`` each, admitted together and completed over ``over_s``."""
    tickets = [admission.admit(items, 10, 60.0) for _ in range(count)]
    for ticket in tickets:
        clock.now += over_s / count
        admission.release(ticket, completed=True)


def test_the_hard_bounds_name_their_settings() -> None:
    admission = Admission(Limits(2, 100, names=("MAX_INFLIGHT", "MAX_INFLIGHT_BYTES")))
    first = admission.admit(1, 60, 1.0)
    with pytest.raises(Overloaded, match=r"MAX_INFLIGHT_BYTES=100") as raised:
        admission.admit(1, 41, 1.0)
    assert raised.value.reason == "bytes"
    admission.admit(1, 40, 1.0)
    with pytest.raises(Overloaded, match=r"2 requests are in flight.*MAX_INFLIGHT=2") as raised:
        admission.admit(1, 0, 1.0)
    assert raised.value.reason == "requests"
    admission.release(first, completed=False)
    admission.admit(1, 60, 1.0)  # room again


def test_a_lone_request_over_the_byte_bound_is_admitted() -> None:
    # Refusing it could never succeed later: the message-size limit is what bounds one request.
    admission = Admission(Limits(4, 100))
    admission.admit(1, 500, 1.0)
    assert admission.bytes == 500


def test_nothing_is_estimated_before_anything_completed_or_below_the_floor() -> None:
    clock = FakeClock()
    admission = Admission(Limits(1000, 10**9, floor=4), clock)
    for _ in range(100):  # no rate yet: only the hard bounds apply
        admission.admit(1, 1, 0.001)
    assert admission.rate() is None


def test_what_would_not_finish_in_time_is_refused_as_load() -> None:
    clock = FakeClock()
    admission = Admission(Limits(1000, 10**9, floor=0, target=0.8, window_s=2.0), clock)
    finish(admission, clock, count=100, over_s=1.0, items=1)  # 100 items in 1 s
    assert admission.rate() == pytest.approx(100.0)
    # A 1 s deadline allows 0.8 s of work: 80 items at 100/s, its own included.
    for _ in range(79):
        admission.admit(1, 1, 1.0)
    admission.admit(1, 1, 1.0)
    with pytest.raises(Overloaded, match=r"80 items in flight at the measured 100 items/s") as e:
        admission.admit(1, 1, 1.0)
    assert e.value.reason == "load"
    admission.admit(1, 1, 10.0)  # a more patient caller still gets in


def test_a_deadline_shorter_than_the_fastest_answer_is_the_callers_problem() -> None:
    clock = FakeClock()
    admission = Admission(Limits(1000, 10**9, floor=8), clock)
    assert admission.fastest(1) is None
    for took in (0.3, 0.12, 0.2):
        ticket = admission.admit(1, 1, 60.0)
        clock.now += took
        admission.release(ticket, completed=True)
    failed = admission.admit(1, 1, 60.0)
    admission.release(failed, completed=False)  # at once, but it failed: not an answer
    assert admission.fastest(1) == pytest.approx(0.12)
    # No load at all, and still no way to answer in 50 ms.
    with pytest.raises(Overloaded, match=r"leaves 50 ms, less than the fastest .* \(120 ms\)") as e:
        admission.admit(1, 1, 0.05)
    assert e.value.reason == "deadline"
    admission.admit(1, 1, 0.13)
    admission.admit(0, 1, 0.05)  # no items (a video): only the hard bounds


def test_a_slow_answer_to_a_large_request_refuses_no_smaller_one() -> None:
    """A 64 MiB request answered in 8 s, the first of all, says nothing of a 100 KB one's time;
    held to it, every ordinary request after it would be refused, and none answered to say
    otherwise. A larger request is held to the smaller one's answer: it is no faster."""
    clock = FakeClock()
    admission = Admission(Limits(1000, 2**30, floor=8), clock)
    large = admission.admit(5, 64 * 2**20, 60.0)
    clock.now += 8.0
    admission.release(large, completed=True)
    small = admission.admit(1, 100_000, 5.0)  # admitted: no answer to one this small yet
    clock.now += 0.1
    admission.release(small, completed=True)
    assert admission.fastest(100_000) == pytest.approx(0.1)
    assert admission.fastest(64 * 2**20) == pytest.approx(0.1)
    with pytest.raises(Overloaded, match="fastest answer") as e:
        admission.admit(5, 64 * 2**20, 0.05)
    assert e.value.reason == "deadline"


def test_the_rate_follows_the_last_window_only() -> None:
    clock = FakeClock()
    admission = Admission(Limits(1000, 10**9, window_s=2.0), clock)
    finish(admission, clock, count=20, over_s=2.0, items=1)  # 10/s
    assert admission.rate() == pytest.approx(10.0)
    finish(admission, clock, count=200, over_s=2.0, items=1)  # now 100/s
    assert admission.rate() == pytest.approx(100.0, rel=0.01)
    clock.now += 5.0  # nothing for a while: nothing measured
    assert admission.rate() is None


def test_completions_below_the_floor_are_not_measured() -> None:
    # Light load says what the callers asked for, not what the pipeline can do.
    clock = FakeClock()
    admission = Admission(Limits(1000, 10**9, floor=4), clock)
    for _ in range(10):
        ticket = admission.admit(1, 1, 1.0)
        clock.now += 0.1
        admission.release(ticket, completed=True)
    assert admission.rate() is None
    failed = admission.admit(1, 1, 1.0)
    admission.release(failed, completed=False)  # a failure is not throughput either
    assert admission.rate() is None


def test_items_free_requests_only_meet_the_hard_bounds() -> None:
    clock = FakeClock()
    admission = Admission(Limits(102, 10**9, floor=0), clock)
    finish(admission, clock, count=10, over_s=1.0, items=1)  # 10 items/s
    for _ in range(100):
        admission.admit(1, 1, 60.0)
    with pytest.raises(Overloaded) as refused:  # 100 items ahead at 10/s: not within 1 s
        admission.admit(1, 1, 1.0)
    assert refused.value.reason == "load"
    admission.admit(0, 1, 0.001)  # e.g. a video: its frames are not known yet
    admission.admit(0, 1, 0.001)
    assert (admission.requests, admission.items) == (102, 100)
    with pytest.raises(Overloaded) as refused:
        admission.admit(0, 1, 0.001)
    assert refused.value.reason == "requests"


@given(
    ops=st.lists(
        st.tuples(st.booleans(), st.integers(0, 8), st.integers(0, 50), st.floats(0.0, 0.5)),
        max_size=200,
    )
)
def test_the_counts_always_match_what_is_held(ops: list[tuple[bool, int, int, float]]) -> None:
    clock = FakeClock()
    limits = Limits(16, 200, floor=2)
    admission = Admission(limits, clock)
    held: list[Ticket] = []
    for admit, items, nbytes, step in ops:
        clock.now += step
        if admit or not held:
            try:
                held.append(admission.admit(items, nbytes, 1.0))
            except Overloaded as exc:
                assert exc.reason in {"requests", "bytes", "load", "deadline"}
        else:
            admission.release(held.pop(0), completed=items % 2 == 0)
        assert admission.requests == len(held) <= limits.max_requests
        assert admission.items == sum(t.items for t in held)
        assert admission.bytes == sum(t.nbytes for t in held)
        assert len(held) <= 1 or admission.bytes <= limits.max_bytes


def test_idle_time_before_a_busy_spell_does_not_count() -> None:
    # Measured from when the pipeline got busy, not over the idle part of the window: else the
    # first moments of a burst after a quiet spell would see a tiny rate and refuse it.
    clock = FakeClock()
    admission = Admission(Limits(1000, 10**9, floor=4, window_s=2.0), clock)
    clock.now += 10.0  # quiet
    held = [admission.admit(1, 1, 60.0) for _ in range(8)]  # busy from here
    clock.now += 0.25
    for ticket in held[:3]:
        admission.release(ticket, completed=True)
    assert admission.rate() is None  # fewer than floor items: no estimate yet, so no refusal
    clock.now += 0.25
    admission.release(held[3], completed=True)
    assert admission.rate() == pytest.approx(4 / 0.5)


def test_a_lull_below_the_floor_between_busy_spells_does_not_dilute_the_rate() -> None:
    # At 70% load a hiccup lifts the requests in flight over the floor, then they fall under it:
    # busy spells with lulls between, whose completions are not measured. Were the lulls' time
    # counted, the rate would read half the pipeline's and refuse requests it would finish in
    # time (the soak's one RESOURCE_EXHAUSTED: "53 items in flight at the measured 18 items/s").
    clock = FakeClock()
    admission = Admission(Limits(1000, 10**9, floor=4, window_s=2.0), clock)
    finish(admission, clock, count=100, over_s=1.0, items=1)  # 100/s; busy for 97 of them
    clock.now += 1.0  # a lull
    finish(admission, clock, count=100, over_s=1.0, items=1)
    assert admission.rate() == pytest.approx(100.0)
    for _ in range(190):  # 1.9 s of work at 100/s: admitted within a 3.5 s deadline (60%)
        admission.admit(1, 1, 3.5)
