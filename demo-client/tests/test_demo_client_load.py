"""The load generator and classification against the in-process fake server."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tritonclient.utils import InferenceServerException

from demo_client.classify import classify, format_prediction, parse_entry
from demo_client.client import NotReadyError, open_clients, wait_ready
from demo_client.load import LoadConfig, Requests, run_load
from demo_client.stats import Recorder

GOOD = [b"img-0", b"img-1", b"img-2"]
BAD = b"BAD: the fake server rejects images that start with BAD"
SLOW = b"SLOW: the fake server never answers images that start with SLOW"


def test_markers_match_the_fake(fake: tuple[str, Any]) -> None:
    assert BAD.startswith(fake[1].BAD) and SLOW.startswith(fake[1].SLOW)


def test_requests_cycle_through_the_images_in_order() -> None:
    requests = Requests([b"a", b"b", b"c"], batch=2, count=4)
    taken = []
    while (job := requests.take()) is not None:
        inputs, images = job
        assert images == 2
        taken.append(inputs[0].shape())
    assert len(taken) == 4  # the count bounds it
    assert requests.take() is None


def test_load_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        LoadConfig(concurrency=0)
    with pytest.raises(ValueError, match="duration or a count"):
        LoadConfig(duration_s=None, count=None)


async def test_count_run_spreads_over_channels_and_counts_errors(target: str) -> None:
    config = LoadConfig(concurrency=3, batch=1, count=12, duration_s=None)
    recorder = Recorder(concurrency=3)
    async with open_clients(target, channels=2) as clients:
        assert len(clients) == 2
        summary = await run_load(clients, config, [*GOOD, BAD], recorder)
    assert summary.requests == 12
    assert summary.errors_by_code == {"INVALID_ARGUMENT": 3}
    assert summary.images == 9
    assert summary.p50_ms is not None and summary.p50_ms > 0


async def test_each_channel_is_its_own_connection(fake: tuple[str, Any]) -> None:
    target, servicer = fake
    servicer.peers.clear()
    config = LoadConfig(concurrency=6, count=30, duration_s=None)
    async with open_clients(target, channels=3) as clients:
        summary = await run_load(clients, config, GOOD, Recorder(6))
    assert summary.errors == 0
    assert len(servicer.peers) == 3, servicer.peers


async def test_duration_run_stops_by_itself(target: str) -> None:
    config = LoadConfig(concurrency=4, batch=3, duration_s=0.3)
    async with open_clients(target) as clients:
        summary = await run_load(clients, config, GOOD, Recorder(4, 3))
    assert summary.errors == 0
    assert summary.images > 0 and summary.images % 3 == 0
    assert 0.3 <= summary.duration_s < 5.0


async def test_request_timeouts_are_errors_not_crashes(target: str) -> None:
    config = LoadConfig(concurrency=2, count=2, duration_s=None, timeout_s=0.2)
    async with open_clients(target) as clients:
        summary = await run_load(clients, config, [SLOW], Recorder(2))
    assert summary.errors_by_code == {"DEADLINE_EXCEEDED": 2}
    assert summary.images == 0


class CountingRecorder(Recorder):
    """Sets ``reached`` once ``n`` requests have succeeded."""

    def __init__(self, n: int, concurrency: int) -> None:
        super().__init__(concurrency)
        self.n = n
        self.reached = asyncio.Event()

    def record_ok(self, latency_s: float, images: int) -> None:
        super().record_ok(latency_s, images)
        if self.requests >= self.n:
            self.reached.set()


async def test_stop_event_ends_a_long_run_at_once(target: str) -> None:
    config = LoadConfig(concurrency=2, duration_s=600.0)
    stop = asyncio.Event()
    recorder = CountingRecorder(5, concurrency=2)
    async with open_clients(target) as clients:
        run = asyncio.create_task(run_load(clients, config, GOOD, recorder, stop))
        await asyncio.wait_for(recorder.reached.wait(), timeout=30)
        stop.set()
        summary = await asyncio.wait_for(run, timeout=10)
    assert summary.requests >= 5
    assert summary.duration_s < 60


async def test_unknown_model_fails_every_request(target: str) -> None:
    config = LoadConfig(model="nope", concurrency=1, count=2, duration_s=None)
    async with open_clients(target) as clients:
        summary = await run_load(clients, config, GOOD, Recorder())
    assert summary.errors_by_code == {"NOT_FOUND": 2}


async def test_classify_returns_top_k_best_first(target: str) -> None:
    async with open_clients(target) as clients:
        top = await classify(clients[0], "classifier", b"img-0", k=5)
        with pytest.raises(InferenceServerException):
            await classify(clients[0], "classifier", BAD, k=5)
    assert len(top) == 5
    assert [p.score for p in top] == sorted((p.score for p in top), reverse=True)
    assert top[0].label == f"class {top[0].index}"


def test_parse_entry_keeps_colons_in_labels() -> None:
    p = parse_entry(b"0.25:7:cock: a rooster")
    assert (p.score, p.index, p.label) == (0.25, 7, "cock: a rooster")
    assert format_prediction(p) == "cock: a rooster (0.250)"
    assert format_prediction(parse_entry("0.5:3")) == "class 3 (0.500)"
    with pytest.raises(ValueError):
        parse_entry("garbage")


async def test_wait_ready_gives_up_with_the_reason(target: str, unused_target: str) -> None:
    async with open_clients(target) as clients:
        await wait_ready(clients[0], target, "classifier", wait_s=1)
        with pytest.raises(NotReadyError, match="model 'nope' is not ready"):
            await wait_ready(clients[0], target, "nope", wait_s=0)
    async with open_clients(unused_target) as clients:
        with pytest.raises(NotReadyError, match="UNAVAILABLE"):
            await wait_ready(clients[0], unused_target, "classifier", wait_s=0.3)
