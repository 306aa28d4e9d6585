"""Prometheus ``/metrics`` over aiohttp, and per-RPC metrics for every gRPC server.

Names follow ``inferline_<service>_<thing>_<unit>``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import grpc
from aiohttp import web
from opentelemetry import trace
from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

logger = logging.getLogger(__name__)

# Latency buckets from 0.5 ms to 20 s: the pipeline's hops live in the low milliseconds.
LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.0, 2.0, 5.0,
    10.0, 20.0,
)  # fmt: skip


async def start_metrics_server(
    port: int, host: str = "0.0.0.0", registry: CollectorRegistry = REGISTRY
) -> tuple[web.AppRunner, int]:
    """Serve ``/metrics`` on ``port`` (0 picks one); returns the runner and the bound port."""

    async def metrics(request: web.Request) -> web.Response:
        # OpenMetrics to a scraper that asks for it (Prometheus does): only it carries exemplars
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        return web.Response(body=encode(registry), headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = int(runner.addresses[0][1]) if runner.addresses else port
    logger.info("metrics on http://%s:%d/metrics", host, bound)
    return runner, bound


def exemplar() -> dict[str, str] | None:
    """The current span as a histogram observation's exemplar, when it is sampled: a
    dashboard's slow bucket then links to a trace of a request that fell in it (OpenMetrics
    exemplars, ``trace_id`` as Grafana looks for it). None while no sampled span is current."""
    context = trace.get_current_span().get_span_context()
    if not context.trace_flags.sampled:
        return None
    return {
        "trace_id": format(context.trace_id, "032x"),
        "span_id": format(context.span_id, "016x"),
    }


@dataclass(frozen=True)
class RpcCollectors:
    """A service's per-RPC metrics (``inferline_<service>_grpc_*``)."""

    requests: Counter  # method, model, code
    duration: Histogram  # method, model
    inflight: Gauge  # method
    received: Counter  # method, model: request bytes as on the wire
    sent: Counter  # method, model: response bytes as on the wire


@functools.cache
def rpc_collectors(service: str) -> RpcCollectors:
    """One set of RPC collectors per service name, however many servers a process starts."""
    prefix = f"inferline_{service}_grpc"
    return RpcCollectors(
        requests=Counter(
            f"{prefix}_requests_total",
            "gRPC requests handled, by method, model and status code",
            ["method", "model", "code"],
        ),
        duration=Histogram(
            f"{prefix}_request_duration_seconds",
            "gRPC request handling time, by method and model",
            ["method", "model"],
            buckets=LATENCY_BUCKETS,
        ),
        inflight=Gauge(f"{prefix}_inflight_requests", "gRPC requests being handled", ["method"]),
        received=Counter(
            f"{prefix}_received_bytes_total",
            "Request message bytes received, by method and model",
            ["method", "model"],
        ),
        sent=Counter(
            f"{prefix}_sent_bytes_total",
            "Response message bytes sent, by method and model",
            ["method", "model"],
        ),
    )


def model_of(message: Any) -> str:
    """The KServe model a request or response names (``model_name``, ``name`` or a config's
    ``name``); ``""`` for a message that names none (server-level RPCs, xDS)."""
    for field in ("model_name", "name"):
        value = getattr(message, field, None)
        if isinstance(value, str):
            return value
    config = getattr(message, "config", None)
    value = getattr(config, "name", None)
    return value if isinstance(value, str) else ""


@dataclass
class _Call:
    """What one RPC has received so far: bytes, and the model its first message named."""

    received: int = 0
    model: str | None = None


# The RPC running in this task. gRPC deserialises a request, runs the handler and serialises
# the response within the RPC's own task, so the (de)serialisers and the handler share it.
_CALL: ContextVar[_Call | None] = ContextVar("inferline_rpc_call", default=None)


def _current_call() -> _Call:
    call = _CALL.get()
    if call is None:
        call = _Call()
        _CALL.set(call)
    return call


def name_model(model: str) -> None:
    """Name the model of the RPC being handled, for a handler that takes raw bytes (whose
    messages the interceptor cannot read: the batcher's)."""
    _current_call().model = model


def call_status(
    context: grpc.aio.ServicerContext[Any, Any], error: BaseException | None
) -> grpc.StatusCode:
    """The status a call ended with: what the handler set, UNKNOWN for an error it raised."""
    code = context.code()
    if code is None:
        return grpc.StatusCode.UNKNOWN if error is not None else grpc.StatusCode.OK
    if isinstance(code, int):  # grpc.aio reports codes set by abort() as ints
        return next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)
    return code


Around = Callable[[grpc.aio.ServicerContext[Any, Any]], contextlib.AbstractContextManager[None]]


def around_handler(
    handler: grpc.RpcMethodHandler,
    around: Around,
    deserialize: Callable[[bytes], Any] | None,
    serialize: Callable[[Any], bytes] | None,
) -> grpc.RpcMethodHandler:
    """``handler`` with each call run inside ``around(context)``, with these (de)serialisers."""
    if handler.unary_unary is not None:
        inner_uu = handler.unary_unary

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            with around(context):
                return await inner_uu(request, context)

        return grpc.unary_unary_rpc_method_handler(unary_unary, deserialize, serialize)
    if handler.stream_stream is not None:
        inner_ss = handler.stream_stream

        async def stream_stream(
            requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[Any]:
            with around(context):
                async for response in inner_ss(requests, context):
                    yield response

        return grpc.stream_stream_rpc_method_handler(stream_stream, deserialize, serialize)
    return handler  # unary-stream and stream-unary: no RPC of this project's has them


class WrappingInterceptor(grpc.aio.ServerInterceptor):
    """Wraps each method's handler (:meth:`wrap`) once: gRPC asks the interceptor on every
    call. Paths starting with one of ``skipped`` (health checks), and reflection, are left as
    they are."""

    skipped: tuple[str, ...] = ("/grpc.health",)

    def __init__(self) -> None:
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    def wrap(self, path: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        raise NotImplementedError

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        path = handler_call_details.method
        if handler is None or path.startswith(self.skipped) or "Reflection" in path:
            return handler
        known = self._wrapped.get(path)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = self.wrap(path, handler)
        self._wrapped[path] = (handler, wrapped)
        return wrapped


class RpcMetrics(WrappingInterceptor):
    """Counts, times and measures every RPC a server handles (health checks and reflection
    excepted): requests by method, model and status code, duration, requests in flight, and
    the bytes of request and response messages as they cross the wire.

    A call's model is the one its first request names. It becomes a label only once the server
    has answered for it: a call answered NOT_FOUND is counted under ``model=""``, so a client
    cannot create series with made-up model names.
    """

    def __init__(self, service: str) -> None:
        super().__init__()  # each method's measured handler made once
        self.collectors = rpc_collectors(service)
        # and each label set's child looked up once
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def _child(self, metric: Counter | Gauge | Histogram, *values: str) -> Any:
        """``metric.labels(*values)``, remembered (methods, models and codes are few)."""
        key = (id(metric), values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def _deserializer(self, deserialize: Callable[[bytes], Any] | None) -> Callable[[bytes], Any]:
        def counted(data: bytes) -> Any:
            message = deserialize(data) if deserialize is not None else data
            call = _current_call()
            call.received += len(data)
            if call.model is None:
                call.model = model_of(message)
            return message

        return counted

    def _serializer(
        self, method: str, serialize: Callable[[Any], bytes] | None
    ) -> Callable[[Any], bytes]:
        def counted(message: Any) -> bytes:
            data = serialize(message) if serialize is not None else message
            call = _CALL.get()
            model = call.model if call is not None and call.model is not None else ""
            self._child(self.collectors.sent, method, model or model_of(message)).inc(len(data))
            return bytes(data)

        return counted

    @contextlib.contextmanager
    def _observed(self, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> Iterator[None]:
        call = _current_call()
        inflight = self._child(self.collectors.inflight, method)
        inflight.inc()
        start, error = time.perf_counter(), None
        try:
            yield
        except BaseException as exc:
            error = exc
            raise
        finally:
            inflight.dec()
            code = call_status(context, error).name
            model = "" if code == "NOT_FOUND" else (call.model or "")
            self._child(self.collectors.requests, method, model, code).inc()
            elapsed = time.perf_counter() - start
            self._child(self.collectors.duration, method, model).observe(elapsed, exemplar())
            self._child(self.collectors.received, method, model).inc(call.received)

    def wrap(self, path: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """``handler``, counted, timed and measured."""
        method = path.rsplit("/", 1)[-1]
        return around_handler(
            handler,
            lambda context: self._observed(method, context),
            self._deserializer(handler.request_deserializer),
            self._serializer(method, handler.response_serializer),
        )


@dataclass(frozen=True)
class HttpCollectors:
    """A service's per-request metrics of its HTTP/REST API (``inferline_<service>_http_*``),
    the REST twins of :class:`RpcCollectors`: ``route`` is the route's path pattern
    (``/v2/models/{model}/infer``) and ``code`` the HTTP status."""

    requests: Counter  # route, model, code
    duration: Histogram  # route, model
    inflight: Gauge  # route
    received: Counter  # route, model: request body bytes
    sent: Counter  # route, model: response body bytes


@functools.cache
def http_collectors(service: str) -> HttpCollectors:
    prefix = f"inferline_{service}_http"
    return HttpCollectors(
        requests=Counter(
            f"{prefix}_requests_total",
            "HTTP/REST requests handled, by KServe route, model and HTTP status",
            ["route", "model", "code"],
        ),
        duration=Histogram(
            f"{prefix}_request_duration_seconds",
            "HTTP/REST request handling time, by route and model",
            ["route", "model"],
            buckets=LATENCY_BUCKETS,
        ),
        inflight=Gauge(f"{prefix}_inflight_requests", "HTTP requests being handled", ["route"]),
        received=Counter(
            f"{prefix}_received_bytes_total", "Request body bytes received", ["route", "model"]
        ),
        sent=Counter(f"{prefix}_sent_bytes_total", "Response body bytes sent", ["route", "model"]),
    )


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def http_metrics(service: str, unmeasured: frozenset[str] = frozenset()) -> Any:
    """An aiohttp middleware that measures every request to a known route but those in
    ``unmeasured`` (health checks). The model becomes a label only once the server has
    answered for it (not 404), as for gRPC; an unknown path is not measured at all."""
    collectors = http_collectors(service)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else None
        if route is None or route in unmeasured:
            return await handler(request)
        inflight = collectors.inflight.labels(route)
        inflight.inc()
        start, code, response = time.perf_counter(), 500, None
        try:
            response = await handler(request)
            code = response.status
            return response
        except web.HTTPException as exc:
            code = exc.status
            raise
        finally:
            inflight.dec()
            model = "" if code == 404 else request.match_info.get("model", "")
            collectors.requests.labels(route, model, str(code)).inc()
            elapsed = time.perf_counter() - start
            collectors.duration.labels(route, model).observe(elapsed, exemplar())
            collectors.received.labels(route, model).inc(request.content_length or 0)
            sent = response.content_length if response is not None else None
            collectors.sent.labels(route, model).inc(sent or 0)

    return middleware
