"""The xDS transport: gRPC streams in, the stream state machines decide, responses out.

Thin on purpose (go-control-plane's server over a cache): every stream holds a pure
:class:`~eds.sotw.SotwStream` or :class:`~eds.delta.DeltaStream`, and wakes up on a request or
on a cache change to send whatever that state machine says the client now needs. Messages
are envoy-data-plane dataclasses; ``Msg.parse`` and ``bytes(msg)`` are grpcio's
(de)serialisers, registered as generic handlers — no generated gRPC code.

Served: the Aggregated Discovery Service (state of the world and delta, Envoy's ``GRPC`` and
``DELTA_GRPC``) and the plain per-type services (EDS, CDS, LDS, RDS: stream, delta, fetch).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import grpc
from envoy_data_plane.envoy.service.discovery.v3 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)

from eds import metrics
from eds.delta import DeltaStream
from eds.resources import (
    CLUSTERS,
    ENDPOINTS,
    LISTENERS,
    ROUTES,
    TYPES,
    Snapshot,
    SnapshotBuilder,
    short_name,
)
from eds.sotw import SotwStream
from eds.streams import Kind, StreamEvent
from inferline import tracing

logger = logging.getLogger(__name__)

ADS = "envoy.service.discovery.v3.AggregatedDiscoveryService"
# service -> (its one resource type, or "" for all; method names: stream, delta, fetch)
PLAIN_SERVICES = {
    "envoy.service.endpoint.v3.EndpointDiscoveryService": (ENDPOINTS, "Endpoints"),
    "envoy.service.cluster.v3.ClusterDiscoveryService": (CLUSTERS, "Clusters"),
    "envoy.service.listener.v3.ListenerDiscoveryService": (LISTENERS, "Listeners"),
    "envoy.service.route.v3.RouteDiscoveryService": (ROUTES, "Routes"),
}
SERVICE_NAMES = (ADS, *PLAIN_SERVICES)

Req = TypeVar("Req", DiscoveryRequest, DeltaDiscoveryRequest)
Resp = TypeVar("Resp", DiscoveryResponse, DeltaDiscoveryResponse)
Req_contra = TypeVar("Req_contra", contravariant=True)
Resp_co = TypeVar("Resp_co", covariant=True)
Observer = Callable[[StreamEvent], None]


class StreamState(Protocol[Req_contra, Resp_co]):
    """What :class:`~eds.sotw.SotwStream` and :class:`~eds.delta.DeltaStream` have in common."""

    @property
    def node_id(self) -> str: ...

    def on_request(self, request: Req_contra) -> StreamEvent: ...

    def responses(self, snapshot: Snapshot) -> Sequence[Resp_co]: ...


class Signal(enum.Enum):
    WAKE = "wake"  # the cache changed
    END = "end"  # the client is gone, or the server is closing


class _Inbox(Generic[Req]):
    """A stream's requests and cache wake-ups, in arrival order; wake-ups coalesce."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Req | Signal] = asyncio.Queue()
        self._woken = False

    def wake(self) -> None:
        if not self._woken:
            self._woken = True
            self.queue.put_nowait(Signal.WAKE)

    def woken(self) -> None:
        self._woken = False

    def end(self) -> None:
        self.queue.put_nowait(Signal.END)


def push_span(
    response: DiscoveryResponse | DeltaDiscoveryResponse,
    node_id: str,
    api: str,
    reason: str,
    snapshot: Snapshot,
) -> Any:
    """A span for one push to one client (None while tracing is off), started when what it
    carries changed (``reason`` "change": its length is how long the change took to reach that
    client) or now (an answer to the client's request); the caller ends it once sent."""
    if not tracing.is_on():
        return None
    kind = short_name(response.type_url)
    version = getattr(response, "version_info", "") or getattr(response, "system_version_info", "")
    start = time.time_ns()
    if reason == "change":
        start -= int((time.monotonic() - snapshot.changed_at) * 1e9)
    attributes = {
        "xds.type": kind, "xds.node": node_id, "xds.api": api, "xds.version": version,
        "xds.resources": len(response.resources), "inferline.push.reason": reason,
    }  # fmt: skip
    return tracing.tracer().start_span(f"push {kind}", start_time=start, attributes=attributes)


class XdsServer:
    """Serves the snapshots of ``builder`` to every stream; ``observers`` see every request."""

    def __init__(self, builder: SnapshotBuilder, observers: Sequence[Observer] = ()) -> None:
        self.builder = builder
        self._observers: list[Observer] = [metrics.observe_event, *observers]
        self._inboxes: set[_Inbox[Any]] = set()
        self._unsubscribe = builder.cache.subscribe(self._wake_all)

    @property
    def streams(self) -> int:
        return len(self._inboxes)

    def add_observer(self, observer: Observer) -> None:
        self._observers.append(observer)

    def register(self, server: grpc.aio.Server) -> None:
        server.add_generic_rpc_handlers(tuple(self.handlers()))

    def handlers(self) -> list[grpc.GenericRpcHandler]:
        def sotw(type_url: str) -> Any:
            return grpc.stream_stream_rpc_method_handler(
                self._sotw_handler(type_url),
                request_deserializer=DiscoveryRequest.parse,
                response_serializer=bytes,
            )

        def delta(type_url: str) -> Any:
            return grpc.stream_stream_rpc_method_handler(
                self._delta_handler(type_url),
                request_deserializer=DeltaDiscoveryRequest.parse,
                response_serializer=bytes,
            )

        handlers = [
            grpc.method_handlers_generic_handler(
                ADS,
                {"StreamAggregatedResources": sotw(""), "DeltaAggregatedResources": delta("")},
            )
        ]
        for service, (type_url, noun) in PLAIN_SERVICES.items():
            fetch = grpc.unary_unary_rpc_method_handler(
                self._fetch_handler(type_url),
                request_deserializer=DiscoveryRequest.parse,
                response_serializer=bytes,
            )
            methods = {f"Stream{noun}": sotw(type_url), f"Delta{noun}": delta(type_url)}
            methods[f"Fetch{noun}"] = fetch
            handlers.append(grpc.method_handlers_generic_handler(service, methods))
        return handlers

    def close(self) -> None:
        """End every open stream (before a graceful stop, so that it does not wait for them)."""
        for inbox in list(self._inboxes):
            inbox.end()

    # -- handlers ---------------------------------------------------------------------------

    def _sotw_handler(self, type_url: str) -> Any:
        types = (type_url,) if type_url else TYPES

        async def handle(
            requests: AsyncIterator[DiscoveryRequest], context: grpc.aio.ServicerContext[Any, Any]
        ) -> AsyncIterator[DiscoveryResponse]:
            async for response in self._serve(SotwStream(types, type_url), "sotw", requests):
                yield response

        return handle

    def _delta_handler(self, type_url: str) -> Any:
        types = (type_url,) if type_url else TYPES

        async def handle(
            requests: AsyncIterator[DeltaDiscoveryRequest],
            context: grpc.aio.ServicerContext[Any, Any],
        ) -> AsyncIterator[DeltaDiscoveryResponse]:
            async for response in self._serve(DeltaStream(types, type_url), "delta", requests):
                yield response

        return handle

    def _fetch_handler(self, type_url: str) -> Any:
        async def fetch(
            request: DiscoveryRequest, context: grpc.aio.ServicerContext[Any, Any]
        ) -> DiscoveryResponse:
            snapshot = self.builder.snapshot()
            if not snapshot.ready:
                await context.abort(grpc.StatusCode.UNAVAILABLE, "the endpoint cache is not ready")
            stream = SotwStream((type_url,), type_url)
            stream.on_request(request)
            return stream.responses(snapshot)[0]

        return fetch

    # -- the stream loop --------------------------------------------------------------------

    async def _serve(
        self, stream: StreamState[Req, Resp], api: str, requests: AsyncIterator[Req]
    ) -> AsyncIterator[Resp]:
        inbox: _Inbox[Req] = _Inbox()
        reader = asyncio.create_task(self._read(requests, inbox))
        self._inboxes.add(inbox)
        metrics.CONNECTED.labels(api).inc()
        try:
            while True:
                item = await inbox.queue.get()
                if item is Signal.END:
                    return
                if item is Signal.WAKE:
                    inbox.woken()
                    reason = "change"
                else:
                    self._report(stream.on_request(item), api)
                    reason = "request"
                snapshot = self.builder.snapshot()
                for response in stream.responses(snapshot):
                    span = push_span(response, stream.node_id, api, reason, snapshot)
                    try:
                        yield response
                    finally:
                        if span is not None:  # sent (or the stream ended)
                            span.end()
                    kind = short_name(response.type_url)
                    metrics.PUSHES.labels(kind, reason).inc()
                    if reason == "change":
                        elapsed = time.monotonic() - snapshot.changed_at
                        metrics.PUSH_SECONDS.labels(kind).observe(elapsed)
        finally:
            reader.cancel()
            self._inboxes.discard(inbox)
            metrics.CONNECTED.labels(api).dec()
            if stream.node_id:
                logger.info("%s stream from %s closed", api, stream.node_id)

    @staticmethod
    async def _read(requests: AsyncIterator[Req], inbox: _Inbox[Req]) -> None:
        try:
            async for request in requests:
                inbox.queue.put_nowait(request)
        except grpc.RpcError as exc:
            logger.debug("xDS stream read ended: %s", exc)
        finally:
            inbox.end()

    def _wake_all(self, changed: Iterable[str]) -> None:
        for inbox in self._inboxes:
            inbox.wake()

    def _report(self, event: StreamEvent, api: str) -> None:
        kind = short_name(event.type_url) if event.type_url else "(no type)"
        if event.kind is Kind.SUBSCRIBE:
            logger.info(
                "%s (%s) subscribed to %s %s%s",
                event.node_id or "a client",
                api,
                kind,
                ", ".join(event.names) or "*",
                f" holding version {event.version}" if event.version else "",
            )
        elif event.kind is Kind.NACK:
            logger.warning(
                "%s (%s) rejected %s version %s, keeps its previous one: %s",
                event.node_id or "a client",
                api,
                kind,
                event.version,
                event.error,
            )
        elif event.kind is Kind.UNSUPPORTED:
            logger.warning("%s asked for %s, which this server does not serve", event.node_id, kind)
        else:
            logger.debug("%s %s %s %s", event.node_id, event.kind, kind, event.version)
        for observer in self._observers:
            observer(event)
