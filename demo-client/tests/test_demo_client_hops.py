"""Each hop's own time from an answer's nested ``Server-Timing``: the stacked bar's segments."""

from __future__ import annotations

import pytest

from demo_client.hops import ABOUT, OUTSIDE, SEGMENTS, exclusive_segments, outside_ms

NESTED = {
    "envoy": 34.0,
    "middleman": 32.5,
    "queue": 2.5,
    "batch": 28.0,
    "decode": 1.0,
    "infer": 23.0,
}


def test_nested_hops_become_each_hops_own_time_in_the_pipelines_order() -> None:
    segments = exclusive_segments(NESTED)
    assert list(segments.items()) == [
        ("envoy", 1.5), ("middleman", 2.0), ("queue", 2.5), ("pod & network", 4.0),
        ("decode", 1.0), ("infer", 23.0),
    ]  # fmt: skip
    assert sum(segments.values()) == pytest.approx(NESTED["envoy"])  # the bar is the whole


def test_a_missing_hop_has_no_segment_and_only_what_is_present_is_taken_out() -> None:
    no_decode = {k: v for k, v in NESTED.items() if k != "decode"}
    segments = exclusive_segments(no_decode)
    assert "decode" not in segments
    assert segments["pod & network"] == 5.0  # batch less infer alone
    assert exclusive_segments({"middleman": 3.0, "queue": 1.0}) == {"middleman": 2.0, "queue": 1.0}
    assert exclusive_segments({}) == {}


def test_a_missing_hop_stands_for_the_hops_inside_it() -> None:
    # no batcher: middleman's own time is less the pod's hops, not counted twice on the bar
    segments = exclusive_segments({"envoy": 12.0, "middleman": 11.0, "decode": 1.0, "infer": 7.0})
    assert segments == {"envoy": 1.0, "middleman": 3.0, "decode": 1.0, "infer": 7.0}
    # no middleman: Envoy's own time is less the batcher's hops
    assert exclusive_segments({"envoy": 10.0, "queue": 2.0, "batch": 5.0})["envoy"] == 3.0


def test_envoys_whole_milliseconds_below_middlemans_clamp_to_zero() -> None:
    segments = exclusive_segments({"envoy": 8.0, "middleman": 8.4, "queue": 9.0})
    assert segments["envoy"] == 0.0 and segments["middleman"] == 0.0
    assert segments["queue"] == 9.0


def test_names_that_are_not_hops_are_left_out() -> None:
    assert exclusive_segments({"infer": 2.0, "total": 50.0}) == {"infer": 2.0}


def test_the_client_measured_the_rest_outside_the_pipeline() -> None:
    segments = exclusive_segments(NESTED)
    assert outside_ms(segments, 40.0) == pytest.approx(6.0)
    assert outside_ms(segments, 30.0) == 0.0  # never below 0
    assert set(ABOUT) == {*SEGMENTS, OUTSIDE}  # the legend says what each one is
