"""The web view's timer: its trace contexts, and its requests to the in-process fake server over
gRPC and to a stand-in REST endpoint, timed hop by hop into the dashboard."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from multidict import CIMultiDict

from demo_client.stats import Recorder
from demo_client.timed import TimedClassifier
from demo_client.timer import Timer, new_trace_context
from demo_client.web_state import WebState
from inferline_testing.waits import wait_for_state

WAIT_S = 30.0
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-01")  # version 00, sampled
TRACE_VIEW = "http://traces.example/{trace_id}"
# What the fake server's answers carry (conftest.py), and the REST stand-in's.
TIMING = {"envoy": 9.0, "middleman": 8.5, "queue": 1.5, "batch": 6.0, "decode": 1.0, "infer": 4.0}
ENVOY_TIMING = "envoy;dur=9"
SERVICES_TIMING = "middleman;dur=8.5, queue;dur=1.5, batch;dur=6, decode;dur=1, infer;dur=4"


def test_a_trace_context_is_sampled_with_fresh_random_ids() -> None:
    contexts = [new_trace_context() for _ in range(20)]
    for context in contexts:
        match = TRACEPARENT.fullmatch(context.traceparent)
        assert match is not None, context.traceparent
        assert match.groups() == (context.trace_id, context.span_id)
    assert len({c.trace_id for c in contexts}) == 20
    assert len({c.span_id for c in contexts}) == 20


def test_a_trace_context_is_never_all_zeros() -> None:
    drawn = iter(["0" * 32, "ab" * 16, "0" * 16, "cd" * 8])  # all zeros is invalid: drawn again
    context = new_trace_context(lambda size: next(drawn))
    assert context.traceparent == f"00-{'ab' * 16}-{'cd' * 8}-01"


def board() -> WebState:
    return WebState({}, [], timer_every_s=0.01, trace_view=TRACE_VIEW)


def timing(dashboard: WebState) -> dict[str, Any]:
    """The page's timing panel."""
    panel: dict[str, Any] = dashboard.snapshot(Recorder())["timing"]
    return panel


def timer(classifier: TimedClassifier, dashboard: WebState, *images: bytes) -> Timer:
    """A timer of ``images`` (or one of its own), 1.5 s into the run."""
    chosen = images or (b"timed",)
    return Timer(classifier, "classifier", chosen, 10.0, dashboard, lambda: 1.5, every_s=0.01)


@pytest.fixture
async def over_grpc(fake: tuple[str, Any]) -> AsyncIterator[tuple[TimedClassifier, Any]]:
    """A classifier of the in-process fake over gRPC, and the fake's servicer."""
    target, servicer = fake
    timed = TimedClassifier(target, "grpc")
    async with contextlib.aclosing(timed):
        yield timed, servicer


async def test_a_timed_request_over_grpc_is_timed_and_traced_under_the_id_the_page_shows(
    over_grpc: tuple[TimedClassifier, Any],
) -> None:
    timed, servicer = over_grpc
    dashboard = board()
    context = await timer(timed, dashboard).once(b"timed-grpc")
    assert context.traceparent in servicer.traceparents  # sent, sampled, as gRPC metadata
    (recorded,) = timing(dashboard)["recent"]
    assert recorded["trace_id"] == context.trace_id
    assert recorded["server_timing"] == TIMING
    assert recorded["segments"]["infer"] == 4.0 and recorded["segments"]["envoy"] == 0.5
    assert recorded["total_ms"] > 0 and recorded["elapsed_s"] == 1.5
    assert recorded["trace_url"] == f"http://traces.example/{context.trace_id}"


async def test_a_failed_timed_request_is_counted_and_the_timer_goes_on(
    over_grpc: tuple[TimedClassifier, Any],
) -> None:
    timed, servicer = over_grpc
    dashboard = board()
    bad = servicer.BAD + b" timed"
    async with timer(timed, dashboard, bad, b"timed-on").running():
        await wait_for_state(
            lambda: dashboard.timed_failed >= 1 and timing(dashboard)["recent"],
            WAIT_S,
            "a failed timed request, then an answered one",
        )
    assert "INVALID_ARGUMENT" in timing(dashboard)["note"]


@pytest.fixture
async def rest() -> AsyncIterator[tuple[str, list[str]]]:
    """A stand-in for the pipeline's REST endpoint: every infer call is answered with a top
    class and the ``Server-Timing`` headers Envoy and middleman add; yields its host:port and
    the ``traceparent`` of each call."""
    seen: list[str] = []

    async def infer(request: web.Request) -> web.Response:
        seen.append(request.headers.get("traceparent", ""))
        await request.read()
        output = {"name": "PROBABILITIES", "datatype": "BYTES", "shape": [1, 1]}
        headers = CIMultiDict([("Server-Timing", ENVOY_TIMING), ("Server-Timing", SERVICES_TIMING)])
        body = {"model_name": "classifier", "outputs": [{**output, "data": ["0.9:281:tabby"]}]}
        return web.json_response(body, headers=headers)

    app = web.Application()
    app.router.add_post("/v2/models/classifier/infer", infer)
    async with TestServer(app, host="127.0.0.1") as server:
        yield f"127.0.0.1:{server.port}", seen


async def test_a_timed_request_over_rest_is_timed_and_traced(rest: tuple[str, list[str]]) -> None:
    target, seen = rest
    dashboard = board()
    timed = TimedClassifier(target, "http")
    async with contextlib.aclosing(timed):
        context = await timer(timed, dashboard).once(b"timed-rest")
    assert seen == [context.traceparent]  # sent as the traceparent header
    (recorded,) = timing(dashboard)["recent"]
    assert recorded["trace_id"] == context.trace_id
    assert recorded["server_timing"] == TIMING


def test_a_timed_request_needs_images() -> None:
    with pytest.raises(ValueError, match="no images"):
        Timer(TimedClassifier("127.0.0.1:1", "grpc"), "classifier", [], 1.0, board(), float)
