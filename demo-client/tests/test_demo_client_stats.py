"""Stats: percentiles, the sliding window, error counting, the summary."""

from __future__ import annotations

import json

import pytest

from demo_client.stats import Recorder, WindowRate, percentiles_ms


class FakeClock:
    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_percentiles_on_known_data() -> None:
    latencies = [ms / 1000 for ms in range(1, 101)]  # 1..100 ms
    p50, p95, p99 = percentiles_ms(latencies, (50, 95, 99))
    assert p50 == pytest.approx(50.5)
    assert p95 == pytest.approx(95.05)
    assert p99 == pytest.approx(99.01)


def test_percentiles_of_nothing_are_none() -> None:
    assert percentiles_ms([], (50, 99)) == [None, None]


def test_window_rate_counts_only_the_last_window() -> None:
    window = WindowRate(window_s=2.0)
    window.add(10.0, 100)  # falls out of the window at 12.0
    window.add(11.0, 10)
    window.add(11.5, 10)
    assert window.rate(11.5) == pytest.approx(120 / 2.0)
    assert window.rate(12.5) == pytest.approx(20 / 2.0)
    assert window.rate(20.0) == 0.0


def test_window_rate_of_a_young_run_divides_by_its_age() -> None:
    window = WindowRate(window_s=2.0)
    window.add(100.5, 50)
    assert window.rate(100.5, started=100.0) == pytest.approx(100.0)
    assert window.rate(100.0, started=100.0) == 0.0


def test_recorder_counts_errors_by_code_and_summarises() -> None:
    clock = FakeClock()
    rec = Recorder(concurrency=4, batch=2, clock=clock)
    rec.start()
    for latency in (0.010, 0.020, 0.030):
        clock.now += 0.5
        rec.record_ok(latency, images=2)
    rec.record_error("UNAVAILABLE")
    rec.record_error("INVALID_ARGUMENT")
    rec.record_error("UNAVAILABLE")
    clock.now += 0.5
    rec.stop()
    clock.now += 100  # a stopped run's numbers no longer move

    s = rec.summary()
    assert (s.images, s.requests, s.errors) == (6, 6, 3)
    assert s.errors_by_code == {"INVALID_ARGUMENT": 1, "UNAVAILABLE": 2}
    assert s.duration_s == pytest.approx(2.0)
    assert s.images_per_s == pytest.approx(3.0)
    assert s.p50_ms == pytest.approx(20.0)
    assert (s.concurrency, s.batch) == (4, 2)
    assert rec.rate_now() == pytest.approx(6 / 2.0)


def test_summary_without_successes_is_json_ready() -> None:
    rec = Recorder(clock=FakeClock())
    rec.record_error("DEADLINE_EXCEEDED")
    data = json.loads(json.dumps(rec.summary().to_dict()))
    assert data["p50_ms"] is None
    assert data["images_per_s"] == 0.0
    assert data["errors_by_code"] == {"DEADLINE_EXCEEDED": 1}


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="window_s"):
        WindowRate(0)


def test_lateness_is_a_percentile_of_the_late_requests_only() -> None:
    recorder = Recorder()
    assert recorder.late == 0 and recorder.lateness_ms(99) is None
    for ms in range(1, 101):
        recorder.record_late(ms / 1000)
    assert recorder.late == 100
    assert recorder.lateness_ms(50) == pytest.approx(50.5)
    assert recorder.requests == 0  # lateness is not a request outcome
