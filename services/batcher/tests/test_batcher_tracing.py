"""A batch is one span, linked to each request it carries and parented on the first sampled
one; each request's span records its batch (items, requests, queue time). Driven on asyncio
with an upstream that echoes (no network), spans read from an in-memory exporter."""

from __future__ import annotations

import asyncio

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from tritonclient.grpc import service_pb2

from batcher.inflight import InFlight
from batcher.scheduler import ModelBatcher, Settings
from inferline import tracing
from inferline_testing.waits import wait_for_state

from .conftest import WAIT_S, echo, infer_request

SETTINGS = Settings(max_batch_size=2, max_queue_delay_s=60.0, max_queue=8, default_timeout_s=60.0)


class EchoUpstream:
    name = "echo upstream"

    async def infer(self, request: bytes, time_left: float) -> bytes:
        return bytes(echo(service_pb2.ModelInferRequest.FromString(request)).SerializeToString())

    async def max_batch_size(self, model: str, version: str, time_left: float) -> int:
        return SETTINGS.max_batch_size


async def test_two_requests_batched_together_are_one_batch_span_linked_to_both() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_ON)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.activate(provider)
    batcher = ModelBatcher("echo", 2, SETTINGS, InFlight(1), EchoUpstream())
    try:

        async def caller(tag: bytes) -> trace.SpanContext:
            with tracing.tracer().start_as_current_span(f"request {tag.decode()}") as span:
                request = infer_request(tag)
                await batcher.infer(request, request.SerializeToString(), None)
                return span.get_span_context()

        first = asyncio.ensure_future(caller(b"a"))  # queued first: its batch waits for b
        await wait_for_state(lambda: len(batcher.queue) == 1, WAIT_S, "request a queued")
        contexts = await asyncio.gather(first, caller(b"b"))
    finally:
        tracing.activate(None)
        await batcher.close()
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"request a", "request b", "batch echo"}, list(spans)
    batch = spans["batch echo"]
    assert {link.context.span_id for link in batch.links} == {c.span_id for c in contexts}
    assert batch.parent is not None and batch.parent.span_id == contexts[0].span_id
    assert batch.attributes is not None
    assert batch.attributes["inferline.batch.items"] == 2
    assert batch.attributes["inferline.batch.requests"] == 2
    for name in ("request a", "request b"):
        attributes = spans[name].attributes
        assert attributes is not None and attributes["inferline.batch.items"] == 2, name
        assert float(str(attributes["inferline.queue.ms"])) >= 0.0
