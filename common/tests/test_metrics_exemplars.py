"""Exemplars: a latency observation made under a sampled span carries its trace, and /metrics
shows it to a scraper that asks for OpenMetrics (Prometheus with exemplar storage)."""

from __future__ import annotations

import aiohttp
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from prometheus_client import CollectorRegistry, Histogram

from inferline.metrics import exemplar, start_metrics_server

TRACE_ID, SPAN_ID = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331


def span(sampled: bool) -> NonRecordingSpan:
    flags = TraceFlags(TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT)
    return NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, is_remote=False, trace_flags=flags))


def test_only_a_sampled_span_is_an_exemplar() -> None:
    assert exemplar() is None  # no span at all
    with trace.use_span(span(sampled=False)):
        assert exemplar() is None  # its trace is not kept: nothing to link to
    with trace.use_span(span(sampled=True)):
        assert exemplar() == {
            "trace_id": "0af7651916cd43dd8448eb211c80319c",
            "span_id": "b7ad6b7169203331",
        }


async def test_metrics_speak_openmetrics_with_exemplars_to_who_asks() -> None:
    registry = CollectorRegistry()
    latency = Histogram("latency_seconds", "a latency", registry=registry)
    with trace.use_span(span(sampled=True)):
        latency.observe(0.2, exemplar())
    runner, port = await start_metrics_server(0, "127.0.0.1", registry)
    url = f"http://127.0.0.1:{port}/metrics"
    openmetrics = {"Accept": "application/openmetrics-text"}
    try:
        async with aiohttp.ClientSession() as session:
            async with session.get(url, headers=openmetrics) as answer:
                assert answer.content_type == "application/openmetrics-text"
                text = await answer.text()
            async with session.get(url) as classic:  # the classic text format: no exemplars
                assert classic.content_type == "text/plain"
                assert "trace_id" not in await classic.text()
    finally:
        await runner.cleanup()
    carried = f'# {{span_id="{SPAN_ID:016x}",trace_id="{TRACE_ID:032x}"}} 0.2'
    assert f'latency_seconds_bucket{{le="0.25"}} 1.0 {carried}' in text
