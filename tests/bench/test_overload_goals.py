"""``make bench-overload``'s goals: each figure against its bound, met or missed (the wall-clock
goals the overload test does not assert)."""

from __future__ import annotations

from typing import Any

from bench.overload import goals


def result(goodput: float, probe_ms: float | None, recovered: float | None) -> dict[str, Any]:
    crowd = {"goodput_ratio": goodput, "probe_refusal_p99_ms": probe_ms}
    return {
        "phases": [
            {"phase": "capacity"},
            {"phase": "closed crowd", **crowd, "recovered_after_s": recovered},
            {"phase": "open crowd", **crowd, "recovered_after_s": 1.0},
        ],
        "short_deadline": {"slowest_refusal_ms": 71.0},
    }


def test_each_goal_is_met_or_missed_and_a_missing_figure_misses() -> None:
    rows = {row["goal"]: row for row in goals(result(0.9, 12.0, None))}
    assert {goal: row["met"] for goal, row in rows.items()} == {
        "closed crowd: goodput ratio >= 0.9": True,
        "closed crowd: probe refused in p99 ms <= 50": True,
        "closed crowd: recovered after s <= 5": False,  # never recovered within the probe
        "open crowd: goodput ratio >= 0.9": True,
        "open crowd: probe refused in p99 ms <= 50": True,
        "open crowd: recovered after s <= 5": True,
        "50 ms requests: slowest refusal ms <= 70": False,
    }
    assert rows["50 ms requests: slowest refusal ms <= 70"]["value"] == 71.0
    assert not any(row["met"] for row in goals(result(0.89, None, 6.0))[:3])
