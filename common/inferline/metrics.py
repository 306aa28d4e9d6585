"""Prometheus ``/metrics`` over aiohttp, and per-RPC metrics for every gRPC server.

Names follow ``inferline_<service>_<thing>_<unit>``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Histogram, generate_latest
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

    async def metrics(_: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = int(runner.addresses[0][1]) if runner.addresses else port
    logger.info("metrics on http://%s:%d/metrics", host, bound)
    return runner, bound


@functools.cache
def _rpc_collectors(service: str) -> tuple[Counter, Histogram]:
    """One set of RPC collectors per service name, however many servers a process starts."""
    requests = Counter(
        f"inferline_{service}_grpc_requests_total",
        "gRPC requests handled, by method and status code",
        ["method", "code"],
    )
    duration = Histogram(
        f"inferline_{service}_grpc_request_duration_seconds",
        "gRPC request handling time, by method",
        ["method"],
        buckets=LATENCY_BUCKETS,
    )
    return requests, duration


class RpcMetrics(grpc.aio.ServerInterceptor):
    """Counts and times every RPC a server handles, labelled by method and status code."""

    def __init__(self, service: str) -> None:
        self.requests, self.duration = _rpc_collectors(service)

    def _observe(
        self,
        method: str,
        start: float,
        context: grpc.aio.ServicerContext[Any, Any],
        error: BaseException | None,
    ) -> None:
        code = context.code()
        if code is None:
            code = grpc.StatusCode.UNKNOWN if error is not None else grpc.StatusCode.OK
        if isinstance(code, int):  # grpc.aio reports codes set by abort() as ints
            code = next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)
        name = method.rsplit("/", 1)[-1]
        self.requests.labels(name, code.name).inc()
        self.duration.labels(name).observe(time.perf_counter() - start)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith("/grpc.health") or "Reflection" in method:
            return handler
        if handler.unary_unary is not None:
            inner_uu = handler.unary_unary

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                start, error = time.perf_counter(), None
                try:
                    return await inner_uu(request, context)
                except BaseException as exc:
                    error = exc
                    raise
                finally:
                    self._observe(method, start, context, error)

            return grpc.unary_unary_rpc_method_handler(
                unary_unary, handler.request_deserializer, handler.response_serializer
            )
        if handler.stream_stream is not None:
            inner_ss = handler.stream_stream

            async def stream_stream(
                requests: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                start, error = time.perf_counter(), None
                try:
                    async for response in inner_ss(requests, context):
                        yield response
                except BaseException as exc:
                    error = exc
                    raise
                finally:
                    self._observe(method, start, context, error)

            return grpc.stream_stream_rpc_method_handler(
                stream_stream, handler.request_deserializer, handler.response_serializer
            )
        return handler
