"""``make bench-overload``'s goals: each figure against its bound, met or missed (the wall-clock
goals the overload test does not assert)."""

from __future__ import annotations

from typing import Any

from bench.overload import goals


def result(
    goodput: float, paced_ms: float | None, recovered: float | None, model: str = "simulated"
) -> dict[str, Any]:
    crowd = {"goodput_ratio": goodput, "paced_refusal_p99_ms": paced_ms, "peak_rss_total_mib": 1300}
    return {
        "model": model,
        "phases": [
            {"phase": "capacity", "peak_rss_total_mib": 1000},
            {"phase": "closed crowd", **crowd, "recovered_after_s": recovered},
            {"phase": "open crowd", **crowd, "recovered_after_s": 1.0},
        ],
        "short_deadline": {"slowest_refusal_ms": 71.0},
    }


def test_each_goal_is_met_or_missed_and_a_missing_figure_misses() -> None:
    rows = {row["goal"]: row for row in goals(result(0.95, 12.0, None))}
    assert {goal: row["met"] for goal, row in rows.items()} == {
        "closed crowd: goodput ratio >= 0.95": True,
        "closed crowd: RSS over capacity's <= 1.3": True,
        "closed crowd: paced caller refused in p99 ms <= 50": True,
        "closed crowd: recovered after s <= 5": False,  # never recovered within the paced calls
        "open crowd: goodput ratio >= 0.95": True,
        "open crowd: RSS over capacity's <= 1.3": True,
        "open crowd: paced caller refused in p99 ms <= 50": True,
        "open crowd: recovered after s <= 5": True,
        "50 ms requests: slowest refusal ms <= 70": False,
    }
    assert rows["50 ms requests: slowest refusal ms <= 70"]["value"] == 71.0
    assert rows["open crowd: RSS over capacity's <= 1.3"]["value"] == 1.3
    missed = {row["goal"]: row["met"] for row in goals(result(0.94, None, 6.0))}
    assert not missed["closed crowd: goodput ratio >= 0.95"]
    assert not missed["closed crowd: paced caller refused in p99 ms <= 50"]  # no figure: not met
    real = {row["goal"]: row["met"] for row in goals(result(0.85, 12.0, 1.0, model="real"))}
    assert real["closed crowd: goodput ratio >= 0.8"]  # the real model's own bar
