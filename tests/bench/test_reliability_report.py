"""docs/reliability.md's generated sections are rendered from the result files."""

from __future__ import annotations

from typing import Any

from bench import reliability_report as report


def phase(name: str, offered: str, images: float, rss: int, **crowd: Any) -> dict[str, Any]:
    codes = crowd.pop("codes", {})
    return {"phase": name, "offered": offered, "images_per_s": images, "p99_ms": 1500.0,
            "failed_by_code": codes, "peak_rss_total_mib": rss, **crowd}  # fmt: skip


OVERLOAD = {
    "model": "simulated",
    "phases": [
        phase("capacity", "closed 64", 43.7, 1000, generator_cpu=0.12),
        phase("closed crowd", "closed 1024", 42.6, 1100, goodput_ratio=0.97,
              paced_refusal_p99_ms=8.0, recovered_after_s=3.0,
              codes={"RESOURCE_EXHAUSTED": 19164}),
        phase("open crowd", "open 437/s", 43.2, 1400, goodput_ratio=0.99,
              paced_refusal_p99_ms=5.1, recovered_after_s=None,
              codes={"RESOURCE_EXHAUSTED": 23563, "DEADLINE_EXCEEDED": 3}),
    ],
    "short_deadline": {"slowest_refusal_ms": 3.4},
}  # fmt: skip


def run(tier: str, fault: str, failed: int, detected: float) -> dict[str, Any]:
    return {"tier": tier, "fault": fault, "requests": 100, "failed": failed,
            "detected_s": detected, "slowest_s": detected + 0.1}  # fmt: skip


def test_the_overload_rows_and_goals_come_from_the_results() -> None:
    text = report.overload_section({"overload-simulated": OVERLOAD, "overload-real": None})
    assert "| simulated GPU | 64 callers | 43.7 | 1.00 | 0 |" in text
    assert "| simulated GPU | 1024 callers | 42.6 | 0.97 | 19,164 refused | 1500 ms | 8 ms " in text
    assert "23,563 refused, 3 deadline_exceeded" in text
    assert "| 1,400 MiB (1.40x) | - |" in text  # no generator figure: not measured
    assert "| 1,000 MiB (1.00x) | 12% |" in text
    assert "simulated GPU, open crowd: RSS over capacity's <= 1.3: 1.4 (**missed**)" in text
    assert "simulated GPU, closed crowd: goodput ratio >= 0.95: 0.97 (met)" in text
    assert "Not measured yet: `bench/results/overload-real.json`" in text


def test_the_faults_table_groups_the_repetitions_by_tier_and_fault() -> None:
    runs = [run("batcher", "kill -9", 0, 0.1), run("middleman", "SIGSTOP", 2, 2.0),
            run("middleman", "SIGSTOP", 0, 1.0), run("middleman", "SIGSTOP", 0, 3.0)]  # fmt: skip
    text = report.faults_section({"runs": runs, "goal_met": False})
    lines = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert lines[1:] == [
        "| middleman | SIGSTOP | 3 | 300 | 2 | 1 | 2.00 / 3.00 s | 3.10 s |",
        "| batcher | kill -9 | 1 | 100 | 0 | 0 | 0.10 / 0.10 s | 0.20 s |",
    ]
    assert "Goal: no failed request in any repetition (**missed**)." in text
    assert "run `make bench-faults`" in report.faults_section(None)


def test_the_readme_summary_comes_from_the_results() -> None:
    runs = [run("batcher", "kill -9", 0, 0.1), run("batcher", "kill -9", 1, 0.3),
            run("triton", "SIGSTOP", 0, 1.5)]  # fmt: skip
    text = report.summary_section(
        {"overload-simulated": OVERLOAD, "overload-real": None}, {"runs": runs, "goal_met": False}
    )
    assert (
        "**Ten times capacity**, on the simulated GPU (`make bench-overload`): 0.97 of capacity "
        "still served to 1,024 callers, 0.99 to an open loop of 437/s; the excess refused by "
        "Envoy (RESOURCE_EXHAUSTED / 429) in 8 ms p99." in text
    )
    assert "real model" not in text  # not measured: no line
    assert (
        "one of two in each of 2 tiers, 2 times each): 1 of 300 requests failed; a kill -9 is "
        "seen in 0.30 s at most, a hang in 1.50 s at most." in text
    )


def test_the_reliability_page_shows_the_committed_results() -> None:
    """The page's sections are the ones `python -m bench.reliability_report` makes."""
    assert report.main(["--check"]) == 0, "run python -m bench.reliability_report"
