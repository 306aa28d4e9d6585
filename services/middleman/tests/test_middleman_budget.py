"""The deadline budget: the caller's remaining time or the configured default, shared by the
stages in turn; a stage is never started once the deadline has passed."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from middleman.budget import Budget, Expired


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.mark.parametrize(
    ("caller", "default", "first_stage"),
    [
        (None, 30.0, 30.0),  # no deadline: the configured default
        (0.5, 30.0, 0.5),  # a shorter deadline than the default wins
        (120.0, 30.0, 120.0),  # so does a longer one: the default is for calls without one
    ],
)
def test_the_callers_deadline_or_else_the_default(
    caller: float | None, default: float, first_stage: float
) -> None:
    budget = Budget.start(caller, default, FakeClock(5000.0))
    assert budget.left("decode") == pytest.approx(first_stage)


@pytest.mark.parametrize("caller", [0.0, -0.25])
def test_a_caller_with_no_time_left_starts_no_stage(caller: float) -> None:
    budget = Budget.start(caller, 30.0, FakeClock(10.0))
    with pytest.raises(Expired, match="before decode could start") as raised:
        budget.left("decode")
    assert raised.value.stage == "decode"


def test_each_stage_gets_what_the_stages_before_it_left() -> None:
    clock = FakeClock(100.0)
    budget = Budget.start(2.0, 30.0, clock)
    clock.advance(0.75)  # decoding
    assert budget.left("inference") == pytest.approx(1.25)
    clock.advance(1.5)  # inference overran
    assert budget.remaining() == pytest.approx(-0.25)
    with pytest.raises(Expired, match=r"250\.0 ms before postprocess"):
        budget.left("postprocess")


@given(
    caller=st.none() | st.floats(-10.0, 1e4),
    default=st.floats(1e-3, 1e4),
    start=st.floats(0.0, 1e6),
    stages=st.lists(st.floats(0.0, 1e3), max_size=6),
)
def test_stages_share_one_deadline_and_never_get_a_non_positive_timeout(
    caller: float | None, default: float, start: float, stages: list[float]
) -> None:
    clock = FakeClock(start)
    budget = Budget.start(caller, default, clock)
    allowed = default if caller is None else caller
    spent, previous = 0.0, float("inf")
    for duration in [0.0, *stages]:
        clock.advance(duration)
        spent += duration
        try:
            left = budget.left("stage")
        except Expired:
            assert allowed - spent <= 1e-6 * max(1.0, abs(start))
            return
        assert left > 0
        assert left <= previous  # time only runs out
        assert left == pytest.approx(allowed - spent, rel=1e-6, abs=1e-6)
        previous = left
