"""OpenTelemetry traces across every gRPC hop, configured the OpenTelemetry way.

On when an OTLP endpoint is set (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``), unless ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none``. Then :func:`setup` gives the process a tracer provider
(``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` name it; the service's own name
otherwise), an OTLP exporter (``OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL``: ``http/protobuf``, the
specification's default, or ``grpc``; endpoint, headers and timeout from their own variables)
behind a batch processor whose queue is bounded (``OTEL_BSP_MAX_QUEUE_SIZE``: a collector that
is down costs spans, never a request; what the queue drops is counted on ``/metrics``,
``otel_sdk_processor_span_processed_total{error_type="queue_full"}``, the SDK's own metric),
and the sampler ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` name, parent-based at
:data:`DEFAULT_RATIO` when unset: one decision, the first hop's, holds for a whole request,
and a client's ``traceparent`` with the sampled flag is traced at any ratio.

Every server the process starts then has a SERVER span per call, its parent the caller's W3C
``traceparent`` (:class:`ServerTracing`), with the call's gRPC status; every channel it dials
passes the current span on (:class:`ClientTracing`). Off, nothing is installed: no
interceptor, no span, no cost.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grpc
from aiohttp import web
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, TraceIdRatioBased
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from inferline.metrics import Handler, WrappingInterceptor, around_handler, call_status

logger = logging.getLogger(__name__)

# The share of requests traced when OTEL_TRACES_SAMPLER is unset (parent-based: the first hop
# decides for the whole request).
DEFAULT_RATIO = 0.01
TRACER = "inferline"

Metadata = Sequence[tuple[str, str | bytes]]


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment asks for traces (an OTLP endpoint, not disabled)."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() == "none":
        return False
    return traces_endpoint_set(environ)


def traces_endpoint_set(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the environment names where spans go (an OTLP endpoint, general or traces')."""
    return bool(_otlp(environ, "ENDPOINT").strip())


def _otlp(environ: Mapping[str, str], setting: str) -> str:
    """An exporter setting as the SDK reads it: ``OTEL_EXPORTER_OTLP_TRACES_<setting>``, else
    ``OTEL_EXPORTER_OTLP_<setting>`` ("" when neither is set)."""
    return (
        environ.get(f"OTEL_EXPORTER_OTLP_TRACES_{setting}")
        or environ.get(f"OTEL_EXPORTER_OTLP_{setting}")
        or ""
    )


def protocol(environ: Mapping[str, str] = os.environ) -> str:
    return (_otlp(environ, "PROTOCOL") or "http/protobuf").strip()


def traces_endpoint(environ: Mapping[str, str] = os.environ) -> str:
    """Where spans go, as the exporters read the environment: the traces URL for http/protobuf
    (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, else ``/v1/traces`` under
    ``OTEL_EXPORTER_OTLP_ENDPOINT``), the collector's address for grpc. For what exports
    without this SDK (Envoy, Triton)."""
    own = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if own:
        return own
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return base if protocol(environ) == "grpc" else base.rstrip("/") + "/v1/traces"


def export_headers(environ: Mapping[str, str] = os.environ) -> str:
    """The headers every export carries, as the environment writes them (``key=value,...``):
    for what exports without this SDK (Envoy; Triton reads the variables itself)."""
    return _otlp(environ, "HEADERS").strip()


def sampling_ratio(environ: Mapping[str, str] = os.environ) -> float:
    """The share of requests without a caller's decision that are traced, read from
    ``OTEL_TRACES_SAMPLER`` / ``_ARG`` as the SDK reads them (:data:`DEFAULT_RATIO` when unset):
    for a sampler outside this SDK, Envoy's front door, which decides first."""
    name = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if not name:
        return DEFAULT_RATIO
    if name.endswith("always_off"):
        return 0.0
    if not name.endswith("traceidratio"):  # always_on; the SDK takes an unknown name for it too
        return 1.0
    try:
        return min(max(float(environ.get("OTEL_TRACES_SAMPLER_ARG", "")), 0.0), 1.0)
    except ValueError:
        return 1.0  # the SDK's reading of a missing or bad argument


def exporter(environ: Mapping[str, str] = os.environ) -> SpanExporter:
    """The OTLP span exporter the environment names (its settings read from there too)."""
    wanted = protocol(environ)
    if wanted == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()
    if wanted == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        return HttpExporter()
    raise ValueError(
        f"OTEL_EXPORTER_OTLP_PROTOCOL={wanted!r} is not supported here: use http/protobuf or grpc"
    )


@functools.cache
def sdk_metrics() -> MeterProvider:
    """The OpenTelemetry SDK's own metrics (its span processor's queue: spans processed, dropped,
    queued), on this process's Prometheus ``/metrics``."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    return MeterProvider(metric_readers=[PrometheusMetricReader()])


class _OnceQueueFull(logging.Filter):
    """The SDK logs each span its full queue drops; one line says it, the metric counts."""

    said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith("Queue full"):
            return True
        if self.said:
            return False
        self.said = True
        record.msg = (
            "the span queue is full (is the OTLP collector down?): spans are dropped, counted "
            'in otel_sdk_processor_span_processed_total{error_type="queue_full"}'
        )
        record.args = ()
        return True


def provider(
    service: str, span_exporter: SpanExporter | None = None, sampler: Sampler | None = None
) -> TracerProvider:
    """A tracer provider as the environment configures it, exporting through ``span_exporter``
    (default: :func:`exporter`) behind a bounded batch processor whose drops are counted, and
    sampling with ``sampler`` (default: the environment's, else parent-based at
    :data:`DEFAULT_RATIO`)."""
    resource = Resource.create()  # OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME
    named = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
        "OTEL_RESOURCE_ATTRIBUTES", ""
    )
    if not named:  # the environment's name wins; the service's own otherwise
        resource = resource.merge(Resource({"service.name": service}))
    if sampler is None and not os.environ.get("OTEL_TRACES_SAMPLER"):
        sampler = ParentBased(TraceIdRatioBased(DEFAULT_RATIO))
    tracer_provider = TracerProvider(resource=resource, sampler=sampler)
    # The SDK counts what its processor drops only when asked (its internal metrics flag).
    os.environ.setdefault("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "true")
    processor = BatchSpanProcessor(span_exporter or exporter(), meter_provider=sdk_metrics())
    tracer_provider.add_span_processor(processor)
    sdk_log = logging.getLogger("opentelemetry.sdk._shared_internal")
    if not any(isinstance(f, _OnceQueueFull) for f in sdk_log.filters):
        sdk_log.addFilter(_OnceQueueFull())
    return tracer_provider


# The provider spans are made with, once tracing is on: read on every call, so a plain global.
_provider: TracerProvider | None = None


def activate(tracer_provider: TracerProvider | None) -> None:
    """Make spans with ``tracer_provider`` from now on (None: tracing off). :func:`setup`
    calls it; a test gives a provider of its own."""
    global _provider
    _provider = tracer_provider


def setup(service: str, sampler: Sampler | None = None) -> bool:
    """Install the process's tracer provider when :func:`enabled`; whether it is on.
    ``sampler``: the service's own default, for an unset ``OTEL_TRACES_SAMPLER``."""
    if not enabled():
        return False
    tracer_provider = provider(
        service, sampler=None if os.environ.get("OTEL_TRACES_SAMPLER") else sampler
    )
    trace.set_tracer_provider(tracer_provider)  # for any library that traces through the API
    activate(tracer_provider)
    logger.info(
        "tracing on: OTLP %s to %s, sampler %s",
        protocol(),
        _otlp(os.environ, "ENDPOINT"),
        tracer_provider.sampler.get_description(),
    )
    return True


def tracer() -> trace.Tracer:
    return (_provider or trace.get_tracer_provider()).get_tracer(TRACER)


def is_on() -> bool:
    """Whether tracing is on in this process (:func:`setup`, :func:`activate`)."""
    return _provider is not None


# --- W3C trace context in gRPC metadata --------------------------------------------------------


class _MetadataGetter(Getter[Metadata]):
    """Reads W3C trace context from gRPC metadata (key, value) pairs."""

    def get(self, carrier: Metadata, key: str) -> list[str] | None:
        found = [v if isinstance(v, str) else v.decode() for k, v in carrier if k == key]
        return found or None

    def keys(self, carrier: Metadata) -> list[str]:
        return [k for k, _ in carrier]


GETTER = _MetadataGetter()


def extract(metadata: Metadata | None) -> otel_context.Context:
    """The context a caller sent (``traceparent``, ``tracestate``), or an empty one."""
    return propagate.extract(metadata or (), getter=GETTER)


def inject(metadata: Metadata | None = None) -> list[tuple[str, str | bytes]]:
    """``metadata`` with the current span's ``traceparent`` (and ``tracestate``) added."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return [*(metadata or ()), *carrier.items()]


def link_of(span: trace.Span | None) -> Link | None:
    """A link to ``span``, if it is a valid one (for a span that carries its work with
    others': a batch)."""
    context = span.get_span_context() if span is not None else None
    return Link(context) if context is not None and context.is_valid else None


@contextlib.contextmanager
def batch_span(
    name: str, links: Sequence[Link | None], attributes: Mapping[str, Any]
) -> Iterator[trace.Span]:
    """A span for work done for several requests at once, linked to each of them, and parented
    on the first sampled one (so that a sampled request's trace holds its batch, and the batch
    is sampled when any of its requests is, and only then)."""
    valid = [link for link in links if link is not None]
    sampled = (link for link in valid if link.context.trace_flags.sampled)
    parent = next(sampled, valid[0] if valid else None)
    context = (
        trace.set_span_in_context(trace.NonRecordingSpan(parent.context))
        if parent is not None
        else otel_context.Context()
    )
    with tracer().start_as_current_span(
        name, context=context, links=valid, attributes=attributes
    ) as span:
        yield span


@contextlib.contextmanager
def step(name: str, attributes: Mapping[str, Any] | None = None) -> Iterator[trace.Span]:
    """A span for one step of the current call's work (a decode, a call to Triton, a video);
    while tracing is off, no span (an invalid one, whose events and attributes go nowhere)."""
    if _provider is None:
        yield trace.INVALID_SPAN
        return
    with tracer().start_as_current_span(name, attributes=attributes) as span:
        yield span


def server_span(
    name: str, parent: otel_context.Context, attributes: Mapping[str, Any]
) -> contextlib.AbstractContextManager[trace.Span]:
    """A SERVER span for a call that came in, current while it runs; its status is the
    caller's to set (from the answer, not from an exception)."""
    return tracer().start_as_current_span(
        name,
        context=parent,
        kind=SpanKind.SERVER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    )


def set_status(span: trace.Span, code: grpc.StatusCode) -> None:
    span.set_attribute("rpc.grpc.status_code", code.value[0])
    if code != grpc.StatusCode.OK:
        span.set_status(Status(StatusCode.ERROR, code.name))


# --- interceptors ------------------------------------------------------------------------------


class ServerTracing(WrappingInterceptor):
    """A SERVER span per call, parented on the caller's ``traceparent``, with its status."""

    # health checks, and xDS streams (each lives as long as its Envoy's connection: hours)
    skipped = ("/grpc.health", "/envoy.service")

    @contextlib.contextmanager
    def _span(self, path: str, context: grpc.aio.ServicerContext[Any, Any]) -> Iterator[None]:
        service, _, method = path.lstrip("/").rpartition("/")
        parent = extract(context.invocation_metadata())
        attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}
        with server_span(path.lstrip("/"), parent, attributes) as span:
            error: BaseException | None = None
            try:
                yield
            except BaseException as exc:
                error = exc
                raise
            finally:
                set_status(span, call_status(context, error))

    def wrap(self, path: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        around = functools.partial(self._span, path)
        return around_handler(
            handler, around, handler.request_deserializer, handler.response_serializer
        )


class ClientTracing(grpc.aio.UnaryUnaryClientInterceptor, grpc.aio.StreamStreamClientInterceptor):
    """Passes the current span on in each call's metadata (W3C ``traceparent``); with
    ``sampled_only``, only a sampled one (for a server that traces whatever carries a
    traceparent, its sampled flag unread: Triton)."""

    def __init__(self, sampled_only: bool = False) -> None:
        self.sampled_only = sampled_only

    def _with_context(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        if (
            self.sampled_only
            and not trace.get_current_span().get_span_context().trace_flags.sampled
        ):
            return details
        metadata = grpc.aio.Metadata(*inject(tuple(details.metadata or ())))
        return grpc.aio.ClientCallDetails(
            details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
        )

    async def intercept_unary_unary(
        self, continuation: Any, client_call_details: grpc.aio.ClientCallDetails, request: Any
    ) -> Any:
        return await continuation(self._with_context(client_call_details), request)

    async def intercept_stream_stream(
        self,
        continuation: Any,
        client_call_details: grpc.aio.ClientCallDetails,
        request_iterator: Any,
    ) -> Any:
        return await continuation(self._with_context(client_call_details), request_iterator)


def http_middlewares(untraced: frozenset[str] = frozenset()) -> list[Any]:
    """What an aiohttp application adds for tracing (nothing while tracing is off): a SERVER
    span per request to a known route but those in ``untraced`` (health checks), parented on
    the caller's ``traceparent`` header; status ERROR for a 5xx answer (a 4xx is the client's)."""
    if not is_on():
        return []

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else None
        if route is None or route in untraced:
            return await handler(request)
        parent = propagate.extract(request.headers)
        attributes = {"http.request.method": request.method, "http.route": route}
        with server_span(f"{request.method} {route}", parent, attributes) as span:
            status = 500
            try:
                response = await handler(request)
                status = response.status
                return response
            except web.HTTPException as exc:
                status = exc.status
                raise
            finally:
                span.set_attribute("http.response.status_code", status)
                if status >= 500:
                    span.set_status(Status(StatusCode.ERROR, f"HTTP {status}"))

    return [middleware]


def server_interceptors() -> list[grpc.aio.ServerInterceptor]:
    """What a server adds for tracing: nothing while tracing is off."""
    return [ServerTracing()] if is_on() else []


def client_interceptors(sampled_only: bool = False) -> list[grpc.aio.ClientInterceptor]:
    """What a channel adds for tracing: nothing while tracing is off (``sampled_only``: see
    :class:`ClientTracing`)."""
    return [ClientTracing(sampled_only)] if is_on() else []
