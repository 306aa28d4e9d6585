"""The web view's pure parts: replica shares, dashboard snapshots, Envoy's /clusters parsed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from demo_client.envoy_hosts import parse_hosts
from demo_client.stats import Recorder
from demo_client.web_state import Frame, HostCounters, ReplicaShares, WebState

A, B = "10.0.0.1:8001", "10.0.0.2:8001"


def hosts(**totals: int) -> list[HostCounters]:
    """host a / b with these rq_total."""
    address = {"a": A, "b": B}
    return [HostCounters(address[k], n, "healthy") for k, n in totals.items()]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_shares_are_request_deltas_over_the_window() -> None:
    shares = ReplicaShares(window_s=2.0)
    assert shares.shares() == {}
    shares.add(0.0, hosts(a=1000))
    assert shares.shares() == {A: 0.0}  # one sample: no requests in the window yet
    shares.add(1.0, hosts(a=1030))
    shares.add(2.0, hosts(a=1060, b=20))  # b is new: it counts from 0
    assert shares.requests() == {A: 60, B: 20}
    assert shares.shares() == {A: 0.75, B: 0.25}
    shares.add(3.0, hosts(a=1090, b=50))  # the base moves to t=1
    assert shares.requests() == {A: 60, B: 50}
    shares.add(4.5, hosts(b=70))  # a left the cluster; b's base is t=2.0
    assert shares.requests() == {B: 50}
    assert [h.address for h in shares.hosts] == [B]


def test_a_counter_that_went_back_counts_from_zero() -> None:
    shares = ReplicaShares(window_s=2.0)
    shares.add(0.0, hosts(a=500, b=500))
    shares.add(1.0, hosts(a=530, b=7))  # b was removed and added again
    assert shares.requests() == {A: 30, B: 7}


def test_hosts_sort_by_port_as_a_number() -> None:
    shares = ReplicaShares()
    shares.add(0.0, [HostCounters(f"h:{p}", 0, "healthy") for p in (8101, 8011, 8001)])
    assert [h.address for h in shares.hosts] == ["h:8001", "h:8011", "h:8101"]


def test_window_must_be_positive() -> None:
    with pytest.raises(ValueError, match="window_s"):
        ReplicaShares(window_s=0)


def running(clock: Clock, images: int = 30) -> Recorder:
    """A recorder of a run 1 s old that has finished ``images`` images in 3 requests."""
    recorder = Recorder(concurrency=2, clock=clock)
    recorder.start()
    clock.now += 1.0
    for _ in range(3):
        recorder.record_ok(0.020, images // 3)
    return recorder


def test_snapshot_of_a_run_with_two_replicas() -> None:
    clock = Clock()
    recorder = running(clock)
    recorder.record_error("UNAVAILABLE", 0.001)
    board = WebState({"target": "t:1", "model": "classifier"}, ["a.jpg", "b.jpg"])
    board.running()
    board.envoy(clock.now - 1, hosts(a=10, b=0))
    board.envoy(clock.now, hosts(a=40, b=10))
    board.labelled(0.5, 1, "tabby, tabby cat", 0.81234)
    board.tick(clock.now, recorder)
    snap = board.snapshot(recorder)
    json.dumps(snap)  # JSON-ready
    assert snap["phase"] == "running" and snap["run"]["target"] == "t:1"
    assert snap["images"] == 30 and snap["requests"] == 4
    assert snap["images_per_s"] == pytest.approx(30.0)  # the 2 s window, a run 1 s old
    assert snap["latency_ms"] == {"p50": 20.0, "p95": 20.0, "p99": 20.0}
    assert snap["errors"] == {"total": 1, "by_code": {"UNAVAILABLE": 1}}
    replicas = snap["replicas"]
    assert replicas["available"] and replicas["note"] == ""
    assert [(r["address"], r["share"], r["images_per_s"]) for r in replicas["lines"]] == [
        (A, 0.75, 22.5),
        (B, 0.25, 7.5),
    ]
    assert snap["history"] == {
        "t": [1.0],
        "total": [30.0],
        "replicas": {A: [22.5], B: [7.5]},
    }
    (recent,) = snap["recent"]
    assert recent == {
        "image": 1, "name": "b.jpg", "label": "tabby, tabby cat", "score": 0.8123, "elapsed_s": 0.5,
    }  # fmt: skip


def test_history_points_come_every_interval_and_align_replicas() -> None:
    clock = Clock()
    recorder = running(clock)
    board = WebState({}, [], history_every_s=0.5, history_len=3)
    board.tick(clock.now, recorder)
    assert board.snapshot(recorder)["history"]["t"] == []  # not running yet
    board.running()
    board.envoy(clock.now, hosts(a=0))
    for step in range(6):  # every 0.25 s: a point every other tick
        if step == 3:
            board.envoy(clock.now, hosts(a=10, b=10))
        board.tick(clock.now, recorder)
        clock.now += 0.25
    history = board.snapshot(recorder)["history"]
    assert history["t"] == [1.0, 1.5, 2.0]
    # b appeared at the third point; before, it was not in the cluster
    assert history["replicas"][B][:2] == [None, None] and history["replicas"][B][2] is not None
    board.finished()
    board.tick(clock.now + 10, recorder)
    assert len(board.snapshot(recorder)["history"]["t"]) == 3  # no points once finished


def test_without_envoy_there_are_no_replica_lines() -> None:
    clock = Clock()
    recorder = running(clock)
    board = WebState({}, [])
    board.running()
    board.envoy(clock.now, hosts(a=1))
    board.envoy_unavailable("Envoy admin http://x:1 is not answering")
    board.tick(clock.now, recorder)
    snap = board.snapshot(recorder)
    assert snap["replicas"] == {
        "available": False,
        "note": "Envoy admin http://x:1 is not answering",
        "lines": [],
    }
    assert snap["history"]["replicas"] == {} and snap["history"]["total"] == [30.0]


def test_recent_images_are_newest_first_and_bounded() -> None:
    board = WebState({}, ["x.jpg"], recent_len=2)
    for n in range(3):
        board.labelled(float(n), 0, f"label {n}", 0.5)
    recent = board.snapshot(Recorder())["recent"]
    assert [r["label"] for r in recent] == ["label 2", "label 1"]


CLUSTERS: dict[str, Any] = {
    "cluster_statuses": [
        {"name": "batcher", "host_statuses": []},
        {
            "name": "triton",
            "host_statuses": [
                {
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": 8011}},
                    "stats": [
                        {"name": "rq_total", "value": "12"},
                        {"type": "GAUGE", "name": "rq_active", "value": "2"},
                        {"type": "GAUGE", "name": "rq_pending_active"},
                    ],
                    "health_status": {"eds_health_status": "DRAINING"},
                    "hostname": "triton-1",
                },
                {
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": 8001}},
                    "stats": [{"name": "rq_total", "value": "40"}],
                    "health_status": {"eds_health_status": "HEALTHY"},
                    "hostname": "triton-0",
                },
                {
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": 8021}},
                    "health_status": {
                        "eds_health_status": "HEALTHY",
                        "failed_active_health_check": True,
                    },
                },
            ],
        },
    ]
}


def test_parse_hosts_of_one_cluster() -> None:
    assert parse_hosts(CLUSTERS, "triton") == [
        HostCounters("127.0.0.1:8011", 12, "draining", "triton-1"),
        HostCounters("127.0.0.1:8001", 40, "healthy", "triton-0"),
        HostCounters("127.0.0.1:8021", 0, "failed_active_health_check", ""),
    ]
    assert parse_hosts(CLUSTERS, "batcher") == []
    assert parse_hosts(CLUSTERS, "nope") is None
    assert parse_hosts({}, "triton") is None


def test_a_video_run_shows_its_upload_and_its_frames_newest_first() -> None:
    board = WebState({"target": "t", "model": "classifier_video"}, [], recent_len=2)
    recorder = Recorder(concurrency=1, batch=1)
    assert board.snapshot(recorder)["video"] is None  # an image run has none
    board.video("cat.webm", 0, 1000)
    for index in (0, 5, 10):
        board.framed(Frame(index, index / 10, "tabby", 0.5, index / 100))
    board.video("cat.webm", 600, 1000)
    video = json.loads(json.dumps(board.snapshot(recorder)))["video"]
    assert (video["file"], video["bytes_sent"], video["total_bytes"]) == ("cat.webm", 600, 1000)
    assert [f["index"] for f in video["frames"]] == [10, 5]  # the newest, at most recent_len
    assert video["frames"][0] == {
        "index": 10, "timestamp_s": 1.0, "label": "tabby", "score": 0.5, "elapsed_s": 0.1,
    }  # fmt: skip


TIMING = {"envoy": 9.0, "middleman": 8.5, "queue": 1.5, "batch": 6.0, "decode": 1.0, "infer": 4.0}
TRACE_VIEW = "http://127.0.0.1:5000/#/experiments/0/traces?selectedEvaluationId=tr-{trace_id}"


def trace_id(n: int) -> str:
    return f"{n:032x}"


def timing_board(**kwargs: Any) -> WebState:
    return WebState({}, [], timer_every_s=0.5, **kwargs)


def test_a_timed_request_is_its_segments_its_total_and_its_trace_link() -> None:
    board = timing_board(trace_view=TRACE_VIEW)
    board.timed(100.0, 2.5, trace_id(7), 12.0, TIMING)
    timing = json.loads(json.dumps(board.snapshot(Recorder())["timing"]))
    assert timing["every_s"] == 0.5 and timing["trace_view"] is True
    assert timing["hops"] == [
        "envoy", "middleman", "queue", "pod & network", "decode", "infer", "client & network",
    ]  # fmt: skip
    assert set(timing["about"]) == set(timing["hops"])
    (timed,) = timing["recent"]
    assert timed == {
        "trace_id": trace_id(7),
        "elapsed_s": 2.5,
        "total_ms": 12.0,
        "segments": {
            "envoy": 0.5,
            "middleman": 1.0,
            "queue": 1.5,
            "pod & network": 1.0,
            "decode": 1.0,
            "infer": 4.0,
            "client & network": 3.0,
        },
        "server_timing": TIMING,
        "trace_url": TRACE_VIEW.replace("{trace_id}", trace_id(7)),
    }
    assert timing["slowest"] == [timed]
    assert timing["failed"] == 0 and timing["note"] == ""


def test_timed_requests_without_a_trace_view_have_no_links() -> None:
    board = timing_board()
    board.timed(100.0, 1.0, trace_id(1), 10.0, TIMING)
    timing = board.snapshot(Recorder())["timing"]
    assert timing["trace_view"] is False
    assert timing["recent"][0]["trace_url"] is None


def test_recent_timed_requests_are_newest_first_and_bounded() -> None:
    board = timing_board(timed_len=3)
    for n in range(5):
        board.timed(100.0 + n, float(n), trace_id(n), 10.0 + n, TIMING)
    recent = board.snapshot(Recorder())["timing"]["recent"]
    assert [p["trace_id"] for p in recent] == [trace_id(4), trace_id(3), trace_id(2)]


def test_the_slowest_are_the_five_slowest_of_the_last_minute() -> None:
    board = timing_board(timed_len=2)
    board.timed(0.0, 0.0, trace_id(99), 500.0, TIMING)  # the slowest, but over a minute ago
    totals = [30.0, 12.0, 45.0, 11.0, 50.0, 20.0, 40.0, 10.0]
    for n, total in enumerate(totals):
        board.timed(11.0 + n, 11.0 + n, trace_id(n), total, TIMING)
    board.timed(70.5, 70.5, trace_id(50), 5.0, TIMING)  # at 70.5: the one of 0.0 is forgotten
    slowest = board.snapshot(Recorder())["timing"]["slowest"]
    assert [p["total_ms"] for p in slowest] == [50.0, 45.0, 40.0, 30.0, 20.0]
    assert [p["trace_id"] for p in slowest][:2] == [trace_id(4), trace_id(2)]


def test_a_failed_timed_request_is_counted_and_said() -> None:
    board = timing_board()
    board.timed(100.0, 1.0, trace_id(1), 10.0, TIMING)
    board.timing_failed(100.5, 1.5, "UNAVAILABLE: no healthy upstream")
    board.timing_failed(101.0, 2.0, "DEADLINE_EXCEEDED: no answer within 10 s")
    timing = board.snapshot(Recorder())["timing"]
    assert timing["failed"] == 2
    assert timing["note"] == (
        "the last failed timed request (2.0 s into the run): "
        "DEADLINE_EXCEEDED: no answer within 10 s"
    )
    assert [p["trace_id"] for p in timing["recent"]] == [trace_id(1)]  # the answers stay


def test_an_answer_without_server_timing_is_all_client_and_network() -> None:
    board = timing_board()
    board.timed(100.0, 1.0, trace_id(1), 10.0, {})
    timing = board.snapshot(Recorder())["timing"]
    assert timing["recent"][0]["segments"] == {"client & network": 10.0}
    assert "no Server-Timing" in timing["note"]


def test_without_a_timed_request_there_is_no_timing_panel() -> None:
    assert WebState({}, []).snapshot(Recorder())["timing"] is None
