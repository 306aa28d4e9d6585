"""Traces across real grpc.aio hops: a caller's W3C ``traceparent`` parents each server's span,
every channel passes the current span on, errors carry their gRPC code, sampling follows the
first hop's decision; and tracing that is off installs nothing. Spans are read from an
in-memory exporter (the OTLP export itself: the end-to-end tests against a real receiver)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, Sampler
from prometheus_client import REGISTRY

from inferline import dial, tracing
from inferline.errors import InferError, grpc_boundary
from inferline.server import start_server
from inferline_testing.ports import free_port

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"


def traceparent(sampled: bool) -> str:
    return f"00-{TRACE_ID}-{CALLER_SPAN}-{'01' if sampled else '00'}"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from traced(ParentBased(ALWAYS_OFF))  # only what a caller sampled is traced


def traced(sampler: Sampler) -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.activate(provider)
    try:
        yield exporter
    finally:
        tracing.activate(None)


class Hop:
    """A raw-bytes service ``test.Hop``: ``Call`` answers at once, or calls ``next`` first;
    ``Fail`` answers INVALID_ARGUMENT."""

    def __init__(self, next_url: str | None = None) -> None:
        self.channel = dial.channel(next_url) if next_url else None

    @grpc_boundary
    async def call(self, request: bytes, context: Any) -> bytes:
        if self.channel is None:
            return b"leaf"
        return bytes(await self.channel.unary_unary("/test.Hop/Call")(request, timeout=5))

    @grpc_boundary
    async def fail(self, request: bytes, context: Any) -> bytes:
        raise InferError(grpc.StatusCode.INVALID_ARGUMENT, "image 0: not an image")

    def register(self, server: grpc.aio.Server) -> None:
        handlers = {
            "Call": grpc.unary_unary_rpc_method_handler(self.call),
            "Fail": grpc.unary_unary_rpc_method_handler(self.fail),
        }
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("test.Hop", handlers),)
        )


async def started(hop: Hop, name: str) -> Any:
    return await start_server(name, 0, [hop.register], ["test.Hop"], host="127.0.0.1")


async def two_hops() -> AsyncIterator[str]:
    leaf = await started(Hop(), "leaf")
    front = await started(Hop(f"127.0.0.1:{leaf.port}"), "front")
    try:
        yield f"127.0.0.1:{front.port}"
    finally:
        await front.stop(0)
        await leaf.stop(0)


async def call(url: str, method: str, metadata: tuple[tuple[str, str], ...]) -> None:
    async with grpc.aio.insecure_channel(url) as channel:
        await channel.unary_unary(f"/test.Hop/{method}")(b"x", metadata=metadata, timeout=5)


def by_name(spans: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans.get_finished_spans()}


async def test_a_callers_traceparent_parents_each_hops_span_in_one_trace(
    spans: InMemorySpanExporter,
) -> None:
    async for url in two_hops():
        await call(url, "Call", (("traceparent", traceparent(sampled=True)),))
    finished = spans.get_finished_spans()
    assert len(finished) == 2, [s.name for s in finished]
    leaf, front = sorted(finished, key=lambda s: s.start_time or 0, reverse=True)
    for span in finished:
        assert span.name == "test.Hop/Call" and span.kind == trace.SpanKind.SERVER
        assert format(span.context.trace_id, "032x") == TRACE_ID
        assert span.attributes is not None and span.attributes["rpc.grpc.status_code"] == 0
    assert front.parent is not None and format(front.parent.span_id, "016x") == CALLER_SPAN
    assert leaf.parent is not None and leaf.parent.span_id == front.context.span_id


async def test_the_first_hops_decision_holds_for_the_whole_request(
    spans: InMemorySpanExporter,
) -> None:
    async for url in two_hops():
        await call(url, "Call", (("traceparent", traceparent(sampled=False)),))
        await call(url, "Call", ())  # no caller's context: the root decides (here: never)
    assert spans.get_finished_spans() == ()


async def test_a_call_answered_with_an_error_has_its_grpc_code_on_its_span(
    spans: InMemorySpanExporter,
) -> None:
    async for url in two_hops():
        with pytest.raises(grpc.aio.AioRpcError):
            await call(url, "Fail", (("traceparent", traceparent(sampled=True)),))
    (span,) = spans.get_finished_spans()
    assert span.status.status_code == trace.StatusCode.ERROR
    assert span.status.description == "INVALID_ARGUMENT"
    assert span.attributes is not None and span.attributes["rpc.grpc.status_code"] == 3


def dropped() -> float:
    """Spans the SDK's span processors dropped for a full queue, from this process's /metrics."""
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        for sample in metric.samples
        if sample.name == "otel_sdk_processor_span_processed_total"
        and sample.labels.get("error_type") == "queue_full"
    )


async def test_a_dead_collector_fails_no_request_and_what_it_costs_in_spans_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # seconds: nothing listens there
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")
    provider = tracing.provider("test")  # the real OTLP exporter, to a dead collector
    before = dropped()
    tracing.activate(provider)
    try:
        async for url in two_hops():
            for _ in range(20):  # 40 spans for a queue of 4: every call still answered
                await call(url, "Call", ())
    finally:
        tracing.activate(None)
        provider.shutdown()
    assert dropped() - before >= 20


def test_tracing_off_installs_no_interceptor() -> None:
    assert not tracing.is_on()
    assert tracing.server_interceptors() == [] and tracing.client_interceptors() == []


@pytest.mark.parametrize(
    ("environ", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
    ],
)
def test_tracing_is_on_when_an_otlp_endpoint_is_set_and_nothing_disables_it(
    environ: dict[str, str], on: bool
) -> None:
    assert tracing.enabled(environ) is on


def test_the_exporter_speaks_the_protocol_the_environment_names() -> None:
    assert isinstance(tracing.exporter({}), HttpExporter)  # the specification's default
    assert isinstance(tracing.exporter({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}), GrpcExporter)
    traces_only = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL":
                   "http/protobuf"}  # fmt: skip
    assert isinstance(tracing.exporter(traces_only), HttpExporter)
    with pytest.raises(ValueError, match="http/json"):
        tracing.exporter({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


def test_the_service_is_named_by_otel_service_name_over_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exporter = InMemorySpanExporter()
    assert tracing.provider("batcher", exporter).resource.attributes["service.name"] == "batcher"
    monkeypatch.setenv("OTEL_SERVICE_NAME", "batcher-eu-1")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=staging")
    attributes = tracing.provider("batcher", exporter).resource.attributes
    assert attributes["service.name"] == "batcher-eu-1"
    assert attributes["deployment.environment"] == "staging"


def test_the_default_sampler_is_parent_based_at_the_default_ratio(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    description = tracing.provider("x", InMemorySpanExporter()).sampler.get_description()
    assert description.startswith(
        "ParentBased{root:TraceIdRatioBased{" + str(tracing.DEFAULT_RATIO)
    )
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_on")
    assert (
        tracing.provider("x", InMemorySpanExporter()).sampler.get_description() == "AlwaysOnSampler"
    )


@pytest.mark.parametrize(
    ("environ", "endpoint"),
    [
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/"}, "http://c:4318/v1/traces"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318",
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://t:1/x",
            },
            "http://t:1/x",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "http://c:4317",
        ),
    ],
)
def test_the_traces_endpoint_is_where_the_sdks_exporter_sends(
    environ: dict[str, str], endpoint: str
) -> None:
    assert tracing.traces_endpoint(environ) == endpoint


@pytest.mark.parametrize(
    ("environ", "ratio"),
    [
        ({}, tracing.DEFAULT_RATIO),
        ({"OTEL_TRACES_SAMPLER": "parentbased_always_off"}, 0.0),
        ({"OTEL_TRACES_SAMPLER": "always_on"}, 1.0),
        (
            {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"},
            0.25,
        ),
        ({"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "nonsense"}, 1.0),
        ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, 1.0),  # unknown: the SDK's always-on
    ],
)
def test_the_sampling_ratio_passed_to_envoy_is_the_sdks(
    environ: dict[str, str], ratio: float
) -> None:
    assert tracing.sampling_ratio(environ) == ratio


async def test_a_sampled_only_channel_passes_on_a_sampled_context_and_no_other(
    spans: InMemorySpanExporter,
) -> None:
    # For Triton, which traces every request that carries a traceparent, sampled or not.
    seen: list[str | None] = []

    async def record(request: bytes, context: Any) -> bytes:
        metadata = dict(context.invocation_metadata())
        seen.append(metadata.get("traceparent"))
        return b"ok"

    def register(server: grpc.aio.Server) -> None:
        handlers = {"Call": grpc.unary_unary_rpc_method_handler(record)}
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("test.Hop", handlers),)
        )

    server = await start_server("triton-like", 0, [register], ["test.Hop"], host="127.0.0.1")
    interceptors = tracing.client_interceptors(sampled_only=True)
    try:
        async with grpc.aio.insecure_channel(
            f"127.0.0.1:{server.port}", interceptors=interceptors
        ) as channel:
            for sampled in (True, False):
                parent = tracing.extract((("traceparent", traceparent(sampled)),))
                with tracing.tracer().start_as_current_span("batch", context=parent):
                    await channel.unary_unary("/test.Hop/Call")(b"x", timeout=5)
    finally:
        await server.stop(0)
    [passed, withheld] = seen
    assert passed is not None and passed.split("-")[1] == TRACE_ID and passed.endswith("-01")
    assert withheld is None


def test_the_export_headers_passed_to_envoy_are_the_environments() -> None:
    assert tracing.export_headers({}) == ""
    both = {"OTEL_EXPORTER_OTLP_HEADERS": "a=1", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "b=2"}
    assert tracing.export_headers(both) == "b=2"  # the traces' own first, as the SDK reads them
    assert tracing.export_headers({"OTEL_EXPORTER_OTLP_HEADERS": " a=1 "}) == "a=1"
