"""docs/performance.md's generated section is rendered from the result files, goal by goal."""

from __future__ import annotations

from typing import Any

import pytest

from bench import report


def scenario(title: str, total: float) -> dict[str, Any]:
    return {
        "title": title,
        "cpu_ms_per_image": {"triton": total / 2, "preprocess": total / 2},
        "total_cpu_ms_per_image": total,
        "images_per_s": 100.0,
        "images_per_s_per_core": round(1000 / total, 1),
        "cores_per_1000_images_per_s": total,
        "decoder_floor_ms_per_image": 1.5,
        "pipeline_overhead_ms_per_image": round(total - total / 2 - 1.5, 2),
        "envoy_kib_per_image": 300.0,
    }


PIPELINE = {
    "cpus": 2,
    "photo_kib": 98.0,
    "duration_s": 20.0,
    "scenarios": {
        "simulated_1": scenario("simulated GPU, 1 image/request", 4.5),
        "simulated_8": scenario("simulated GPU, 8 images/request", 3.6),
    },
    "scale_out": {
        "simulated_gpu": "--simulated-t0-ms 400",
        "points": {
            "1": {"images_per_s": 16.0, "efficiency": 1.0, "p99_ms": 990.0},
            "4": {"images_per_s": 60.0, "efficiency": 0.938, "p99_ms": 1100.0},
        },
    },
}
RESULTS: dict[str, dict[str, Any] | None] = {
    "pipeline": PIPELINE,
    "preprocess": None,
    "e2e": {"ratio": 0.64},
    "batcher": {"added_latency": {"added_p50_ms": 0.9}},
}
PAGE = f"# title\n\nbefore\n\n{report.START}\nold figures\n{report.END}\n\nafter\n"


def test_the_section_between_the_markers_is_replaced_and_nothing_else() -> None:
    text = report.render(PAGE, RESULTS)
    assert text.startswith("# title\n\nbefore\n\n") and text.endswith("\n\nafter\n")
    assert "old figures" not in text
    assert "| preprocess | 2.25 ms | 1.80 ms |" in text
    assert "| **total** | 4.5 ms | 3.6 ms |" in text
    assert "| **pipeline overhead** | 0.75 ms | 0.3 ms |" in text
    assert "| 4 | 60.0 | 0.938 | 0.90 | 1100.0 ms |" in text  # 4 GPUs' ceiling: 66.7/s


def test_each_goal_says_met_or_missed_with_its_figure() -> None:
    lines = report.goals(RESULTS)
    assert lines == [
        "- in-pod, simulated GPU, 1 image per request: 4.5 CPU ms per image, goal ≤ 6.0 (met)",
        "- in-pod, 1 image per request: pipeline overhead 0.75 CPU ms per image, goal ≤ 1.5 (met)",
        "- in-pod, simulated GPU, 8 images per request: 3.6 CPU ms per image, goal ≤ 3.5 "
        "(**missed**)",
        "- in-pod, 8 images per request: pipeline overhead 0.3 CPU ms per image, goal ≤ 0.5 (met)",
        "- in-pod, bytes through Envoy per image (every cluster, both ways): 300.0 KiB for a "
        "98.0 KiB photo, goal ≤ 408.0 (met)",
        "- scale-out efficiency at 4 replicas: 0.938, goal ≥ 0.9 (met)",
        "- end to end / model only (`make bench-e2e`): 0.64, goal ≥ 0.7 (**missed**)",
        "- latency the batcher adds, p50 (`make bench-batcher`): 0.9 ms, goal ≤ 1.0 (met)",
    ]


def test_a_page_without_markers_is_refused() -> None:
    with pytest.raises(SystemExit, match="no performance markers"):
        report.render("# no section\n", RESULTS)


def test_the_performance_page_shows_the_committed_results() -> None:
    """The page's section is the one `python -m bench.report` makes from bench/results."""
    assert report.main(["--check"]) == 0, "run python -m bench.report"
