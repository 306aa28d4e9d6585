"""The load generator and classification against the in-process fake server."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from demo_client.classify import (
    Prediction,
    format_prediction,
    labelled_requests,
    parse_entry,
)
from demo_client.client import NotReadyError, open_clients, wait_ready
from demo_client.load import (
    Backoff,
    InferRequest,
    LoadConfig,
    Outcome,
    Requests,
    image_requests,
    poisson_arrivals,
    run_load,
    running,
    tensor_requests,
)
from demo_client.stats import Recorder
from demo_client.timed import TimedClassifier, parse_timing
from demo_client.transports import GRPC, HTTP
from inferline_testing.waits import wait_for_state

GOOD = [b"img-0", b"img-1", b"img-2"]
BAD = b"BAD: the fake server rejects images that start with BAD"
SLOW = b"SLOW: the fake server never answers images that start with SLOW"
HOLD = b"HOLD: the fake server answers images that start with HOLD once released"
PIXELS = "pixels"
WAIT_S = 30.0  # generous: only bounds how long a broken run takes to fail


def test_markers_match_the_fake(fake: tuple[str, Any]) -> None:
    servicer = fake[1]
    assert BAD.startswith(servicer.BAD) and SLOW.startswith(servicer.SLOW)
    assert HOLD.startswith(servicer.HOLD)


def test_image_requests_cycle_through_the_images_in_order() -> None:
    factory = image_requests([b"a", b"b", b"c"], batch=2)
    first = factory(0)
    assert first.items == 2 and first.inputs[0].shape() == [2]
    assert [o.name() for o in first.outputs] == ["PROBABILITIES"]
    # request r starts at image 2r mod 3: 0, 2, 1, 0, … — a batch is serialised once
    assert factory(3) is first and factory(1) is not first and factory(4) is factory(1)
    requests = Requests(factory, count=4)
    assert [requests.take() is not None for _ in range(5)] == [True] * 4 + [False]
    assert requests.taken == 4


def test_tensor_requests_count_the_first_dimension() -> None:
    request = tensor_requests("INPUT", np.zeros((3, 2, 2), np.uint8), "PROBS")(7)
    assert request.items == 3
    assert request.inputs[0].datatype() == "UINT8" and request.inputs[0].shape() == [3, 2, 2]
    assert request.outputs[0].name() == "PROBS"
    with pytest.raises(ValueError, match="first dimension"):
        tensor_requests("INPUT", np.zeros((0, 2), np.uint8), "PROBS")


def test_load_config_rejects_nonsense() -> None:
    with pytest.raises(ValueError, match="concurrency"):
        LoadConfig(concurrency=0)
    with pytest.raises(ValueError, match="duration or a count"):
        LoadConfig(duration_s=None, count=None)
    with pytest.raises(ValueError, match="rate"):
        LoadConfig(rate=0.0)
    with pytest.raises(ValueError, match="warmup_s"):
        LoadConfig(warmup_s=-1.0)


def test_poisson_arrivals_are_seeded_and_at_the_rate() -> None:
    first = list(itertools.islice(poisson_arrivals(50.0, seed=7), 20_000))
    again = list(itertools.islice(poisson_arrivals(50.0, seed=7), 20_000))
    other = list(itertools.islice(poisson_arrivals(50.0, seed=8), 20_000))
    assert first == again and first != other
    assert all(b > a for a, b in itertools.pairwise(first))
    assert first[-1] / len(first) == pytest.approx(1 / 50.0, rel=0.03)  # mean gap


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
    images = [b"peers-0", b"peers-1"]  # this test's own, so stray calls are not counted
    config = LoadConfig(concurrency=6, count=30, duration_s=None)
    async with open_clients(target, channels=3) as clients:
        summary = await run_load(clients, config, images, Recorder(6))
    assert summary.errors == 0
    peers = set().union(*(servicer.peers.get(image, set()) for image in images))
    assert len(peers) == 3, peers


async def test_duration_run_stops_by_itself(target: str) -> None:
    config = LoadConfig(concurrency=4, batch=3, duration_s=0.3)
    async with open_clients(target) as clients:
        run = run_load(clients, config, GOOD, Recorder(4, 3))
        summary = await asyncio.wait_for(run, WAIT_S)
    assert summary.errors == 0
    assert summary.images > 0 and summary.images % 3 == 0


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
        await asyncio.wait_for(recorder.reached.wait(), WAIT_S)
        stop.set()
        summary = await asyncio.wait_for(run, WAIT_S)  # not the 600 s it was configured for
    assert summary.requests >= 5


async def test_a_drained_stop_sends_nothing_more_and_records_what_was_in_flight(
    fake: tuple[str, Any],
) -> None:
    target, servicer = fake
    servicer.release.clear()
    held = servicer.held
    outcomes: list[Outcome] = []
    config = LoadConfig(concurrency=2, duration_s=600.0)
    stop = asyncio.Event()
    async with open_clients(target) as clients:
        run = run_load(clients, config, [HOLD], Recorder(2), stop, drain=True,
                       on_outcome=outcomes.append)  # fmt: skip
        task = asyncio.create_task(run)
        await wait_for_state(lambda: servicer.held == held + 2, WAIT_S, "two calls")
        stop.set()
        servicer.release.set()
        summary = await asyncio.wait_for(task, WAIT_S)
    assert servicer.held == held + 2  # nothing sent after the stop ...
    assert summary.requests == 2 and summary.errors == 0  # ... and nothing in flight abandoned
    assert [o.error for o in outcomes] == [None, None]


async def test_every_recorded_request_reaches_the_hook_as_it_ended(target: str) -> None:
    outcomes: list[Outcome] = []
    config = LoadConfig(concurrency=2, count=8, duration_s=None)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with open_clients(target) as clients:
        summary = await run_load(
            clients, config, [*GOOD, BAD], Recorder(2), on_outcome=outcomes.append
        )
    ended = loop.time()
    assert len(outcomes) == summary.requests == 8
    failed = [o for o in outcomes if o.error is not None]
    assert [(o.error, o.message) for o in failed] == [
        ("INVALID_ARGUMENT", "image 0 does not decode")
    ] * 2  # requests 3 and 7 carry BAD
    assert all(o.message == "" for o in outcomes if o.error is None)
    assert all(started <= o.sent and o.sent + o.latency_s <= ended for o in outcomes)
    assert all(o.latency_s > 0 for o in outcomes)


async def test_running_loads_until_its_block_ends(target: str) -> None:
    recorder = CountingRecorder(5, concurrency=2)
    config = LoadConfig(concurrency=2, duration_s=600.0)

    async def block() -> None:
        async with open_clients(target) as clients, running(clients, config, GOOD, recorder):
            await recorder.reached.wait()

    await asyncio.wait_for(block(), WAIT_S)  # not the 600 s it was configured for
    assert recorder.requests >= 5


async def test_warm_up_requests_are_sent_but_not_recorded(fake: tuple[str, Any]) -> None:
    target, servicer = fake
    servicer.release.clear()
    held = servicer.held
    config = LoadConfig(concurrency=1, count=3, duration_s=None, warmup_s=1.0)
    recorder = Recorder()
    async with open_clients(target) as clients:
        run = asyncio.create_task(run_load(clients, config, [HOLD], recorder))
        await wait_for_state(lambda: servicer.held == held + 1, WAIT_S, "the first call")
        # the first request was sent in the warm-up; it is answered after the warm-up ends
        await wait_for_state(lambda: recorder.elapsed() > 0, WAIT_S, "the end of the warm-up")
        servicer.release.set()
        summary = await asyncio.wait_for(run, WAIT_S)
    assert servicer.held == held + 3
    assert summary.requests == 2 and summary.errors == 0


async def test_tensor_requests_reach_the_model_as_sent(fake: tuple[str, Any]) -> None:
    target, servicer = fake
    servicer.pixels_seen.clear()
    tensor = np.full((2, 3, 4, 4), 7, np.uint8)
    config = LoadConfig(model=PIXELS, concurrency=2, count=3, duration_s=None)
    async with open_clients(target) as clients:
        factory = tensor_requests("INPUT", tensor, "PROBS")
        summary = await run_load(clients, config, factory, Recorder(2))
    assert summary.errors == 0
    assert summary.requests == 3 and summary.images == 6  # two items a request
    assert servicer.pixels_seen == [("INPUT", "UINT8", (2, 3, 4, 4))] * 3


async def test_an_answer_with_other_than_the_items_is_a_bad_response(target: str) -> None:
    sent = tensor_requests("INPUT", np.zeros((2, 3), np.uint8), "PROBS")(0)
    claims_three = InferRequest(sent.inputs, sent.outputs, items=3)  # the answer has two rows
    config = LoadConfig(model=PIXELS, concurrency=1, count=2, duration_s=None)
    async with open_clients(target) as clients:
        summary = await run_load(clients, config, lambda number: claims_three, Recorder())
    assert summary.errors_by_code == {"BAD_RESPONSE": 2}


async def test_open_loop_sends_arrivals_without_waiting_for_answers(
    fake: tuple[str, Any],
) -> None:
    target, servicer = fake
    servicer.release.clear()
    held = servicer.held
    config = LoadConfig(rate=1e6, concurrency=10, count=5, duration_s=None, seed=1)
    recorder = Recorder(10)
    async with open_clients(target) as clients:
        run = asyncio.create_task(run_load(clients, config, [HOLD], recorder))
        # a closed loop would have one request in flight per worker; here all five are out
        await wait_for_state(lambda: servicer.held == held + 5, WAIT_S, "five calls")
        assert recorder.requests == 0  # none answered yet
        servicer.release.set()
        summary = await asyncio.wait_for(run, WAIT_S)
    assert summary.requests == 5 and summary.errors == 0


async def test_open_loop_holds_arrivals_beyond_the_cap(fake: tuple[str, Any]) -> None:
    target, servicer = fake
    servicer.release.clear()
    held = servicer.held
    taken: list[int] = []
    images = image_requests([HOLD])

    def factory(number: int) -> InferRequest:
        taken.append(number)
        return images(number)

    # at a million arrivals/s all five are due at once: only the cap holds three back
    config = LoadConfig(rate=1e6, concurrency=2, count=5, duration_s=None, seed=1)
    recorder = Recorder(2)
    async with open_clients(target) as clients:
        run = asyncio.create_task(run_load(clients, config, factory, recorder))
        await wait_for_state(lambda: servicer.held == held + 2, WAIT_S, "two calls")
        assert taken == [0, 1]
        servicer.release.set()
        summary = await asyncio.wait_for(run, WAIT_S)
    assert taken == [0, 1, 2, 3, 4]
    assert summary.requests == 5 and summary.errors == 0
    assert recorder.late >= 3  # the three held back went out after they were due


async def test_open_loop_run_stops_at_its_deadline(target: str) -> None:
    config = LoadConfig(rate=200.0, concurrency=50, duration_s=0.3, seed=3)
    async with open_clients(target) as clients:
        run = run_load(clients, config, GOOD, Recorder(50))
        summary = await asyncio.wait_for(run, WAIT_S)
    assert summary.requests > 0 and summary.errors == 0


async def test_unknown_model_fails_every_request(target: str) -> None:
    config = LoadConfig(model="nope", concurrency=1, count=2, duration_s=None)
    async with open_clients(target) as clients:
        summary = await run_load(clients, config, GOOD, Recorder())
    assert summary.errors_by_code == {"NOT_FOUND": 2}


async def test_classify_returns_top_k_best_first(target: str) -> None:
    timed = TimedClassifier(target, "grpc")
    async with contextlib.aclosing(timed):
        answer = await timed.classify("classifier", b"img-0", 5, 10)
        with pytest.raises(InferenceServerException):
            await timed.classify("classifier", BAD, 5, 10)
    top = answer.predictions
    assert answer.timing == {  # Envoy's in the initial metadata, the services' in the trailers
        "envoy": 9.0, "middleman": 8.5, "queue": 1.5, "batch": 6.0, "decode": 1.0, "infer": 4.0,
    }  # fmt: skip
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
        served = "model 'nope' is not served there; it serves classifier, classifier_video, pixels"
        with pytest.raises(NotReadyError, match=served):
            await wait_ready(clients[0], target, "nope", wait_s=0)
    for transport in (GRPC, HTTP):  # nobody there: the same answer over either transport
        async with open_clients(unused_target, transport=transport) as clients:
            with pytest.raises(NotReadyError, match="UNAVAILABLE"):
                await wait_ready(clients[0], unused_target, "classifier", wait_s=0.3)


def test_a_refused_worker_backs_off_doubling_with_jitter_and_resets_on_an_answer() -> None:
    backoff = Backoff(first_s=0.05, most_s=0.4)
    ceilings = []
    for _ in range(6):
        ceilings.append(backoff.next_s)
        assert 0.0 <= backoff.after("RESOURCE_EXHAUSTED") <= ceilings[-1]
    assert ceilings == [0.05, 0.1, 0.2, 0.4, 0.4, 0.4]
    assert backoff.after("UNAVAILABLE") == 0.0  # only a refusal for load pauses
    assert backoff.next_s == 0.05
    assert backoff.after(None) == 0.0


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def top1(rows: list[str]) -> np.ndarray[Any, Any]:
    """A class_count=1 answer: BYTES [N, 1]."""
    return np.array([[r.encode()] for r in rows], dtype=np.object_)


def class_count(output: Any) -> int:
    """An ``InferRequestedOutput``'s class_count (0: the probabilities themselves)."""
    parameters = output._get_tensor().parameters
    return int(parameters["classification"].int64_param) if "classification" in parameters else 0


def test_labelled_requests_ask_one_request_per_interval_for_labels() -> None:
    clock = Clock()
    seen: list[tuple[int, Prediction]] = []
    factory = labelled_requests(
        [b"a", b"b", b"c"], 2, lambda i, p: seen.append((i, p)), every_s=0.5, clock=clock
    )
    first = factory(0)  # the first request asks for labels
    assert [o.name() for o in first.outputs] == ["PROBABILITIES"]
    assert class_count(first.outputs[0]) == 1
    assert first.on_answer is not None and first.items == 2
    plain = factory(1)  # then the load's own requests until 0.5 s have passed
    assert plain.on_answer is None and class_count(plain.outputs[0]) == 0
    assert plain.inputs[0].shape() == [2]
    clock.now += 0.5
    labelled = factory(1)  # request 1 carries images 2 and 0
    assert labelled.on_answer is not None
    labelled.on_answer(top1(["0.9:281:tabby", "0.4:7:cock"]))
    assert seen == [(2, Prediction(0.9, 281, "tabby")), (0, Prediction(0.4, 7, "cock"))]
    labelled.on_answer(top1(["not a classification"]))  # skipped, not raised
    assert len(seen) == 2
    with pytest.raises(ValueError, match="every_s"):
        labelled_requests([b"a"], 1, lambda i, p: None, every_s=0)


def test_server_timing_reads_as_the_pipelines_hops_in_order() -> None:
    values = ["envoy;dur=33", "queue;dur=2.3, middleman;dur=32.4, batch;dur=28, x;desc=1, y;dur=?"]
    timing = parse_timing(values)
    assert list(timing.items()) == [
        ("envoy", 33.0), ("middleman", 32.4), ("queue", 2.3), ("batch", 28.0),
    ]  # fmt: skip
