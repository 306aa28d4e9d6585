"""Per-hop timing in every answer, as the W3C ``Server-Timing`` header says it.

Each hop of a request adds what it measured: the GPU pod its ``decode`` and ``infer``, the
batcher the request's ``queue`` and its ``batch`` (the upstream call that carried it), middleman
its own ``middleman`` total, Envoy's front door its ``envoy`` total; each answers with its own
and everything below it, in ``server-timing`` trailing metadata (gRPC) or the ``Server-Timing``
header (REST): ``middleman;dur=9.10, queue;dur=0.41, batch;dur=8.02, decode;dur=2.30,
infer;dur=5.12`` (milliseconds).

A call collects into its own list (:func:`collecting`, a context variable: the servers'
:class:`ServerTiming` interceptor and the middleware of :func:`http_middlewares` open one per
call); the code beneath :func:`record` s into it and :func:`absorb` s what the calls it makes
answered. Outside a collecting call, both do nothing. ``INFERLINE_SERVER_TIMING=false`` turns
it off in a process.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import grpc
from aiohttp import web

from inferline.metrics import Handler, WrappingInterceptor, around_handler

KEY = "server-timing"  # gRPC metadata key; HTTP's Server-Timing header, case aside
ENV = "INFERLINE_SERVER_TIMING"

Entry = tuple[str, float]  # a hop's name, milliseconds

_COLLECTED: ContextVar[list[Entry] | None] = ContextVar("inferline_timing", default=None)


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    return environ.get(ENV, "true").strip().lower() not in ("false", "0", "no", "off")


@contextlib.contextmanager
def collecting() -> Iterator[list[Entry]]:
    """A list the code beneath records into, for this call (this task and what it awaits)."""
    entries: list[Entry] = []
    token = _COLLECTED.set(entries)
    try:
        yield entries
    finally:
        _COLLECTED.reset(token)


def active() -> bool:
    """Whether a call is collecting (else there is nothing to measure for)."""
    return _COLLECTED.get() is not None


def record(name: str, seconds: float) -> None:
    entries = _COLLECTED.get()
    if entries is not None:
        entries.append((name, seconds * 1000))


def extend(entries: Iterable[Entry]) -> None:
    """Entries measured elsewhere for this call (by a batch's task, for each request)."""
    collected = _COLLECTED.get()
    if collected is not None:
        collected.extend(entries)


def absorb(metadata: Sequence[tuple[str, str | bytes]] | None) -> None:
    """What a call made for this one answered in its metadata."""
    collected = _COLLECTED.get()
    if collected is None or not metadata:
        return
    for key, value in metadata:
        if key == KEY:
            collected.extend(parse(value if isinstance(value, str) else value.decode()))


def parse(value: str) -> list[Entry]:
    """``Server-Timing`` entries that carry a duration (``name;dur=1.5``); others are left."""
    entries = []
    for metric in value.split(","):
        name, *params = (part.strip() for part in metric.split(";"))
        for param in params:
            key, _, number = param.partition("=")
            if key.strip().lower() == "dur" and name:
                with contextlib.suppress(ValueError):
                    entries.append((name, float(number)))
                break
    return entries


def header(entries: Iterable[Entry]) -> str:
    return ", ".join(f"{name};dur={ms:.2f}" for name, ms in entries)


def answered(entries: list[Entry], own: str, started: float) -> str:
    """The header for an answer: ``own`` (this hop's total since ``started``, unless "") first,
    then what was collected."""
    if own:
        entries.insert(0, (own, (time.perf_counter() - started) * 1000))
    return header(entries)


class ServerTiming(WrappingInterceptor):
    """Collects for each unary call and answers with it in ``server-timing`` trailing metadata;
    ``own``: this hop's name for its total ("": it reports only its parts)."""

    skipped = ("/grpc.health", "/envoy.service")

    def __init__(self, own: str = "") -> None:
        super().__init__()
        self.own = own

    @contextlib.contextmanager
    def _timed(self, context: grpc.aio.ServicerContext[Any, Any]) -> Iterator[None]:
        started = time.perf_counter()
        with collecting() as entries:
            yield
            value = answered(entries, self.own, started)
            if value:
                trailing = tuple(context.trailing_metadata() or ())
                context.set_trailing_metadata((*trailing, (KEY, value)))

    def wrap(self, path: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        if not handler.unary_unary:  # a stream's answer is its messages, each as it goes
            return handler
        return around_handler(
            handler, self._timed, handler.request_deserializer, handler.response_serializer
        )


def server_interceptors(own: str = "") -> list[grpc.aio.ServerInterceptor]:
    """What a server adds for per-hop timing: nothing while it is off."""
    return [ServerTiming(own)] if enabled() else []


def http_middlewares(own: str, untimed: frozenset[str] = frozenset()) -> list[Any]:
    """What an aiohttp application adds: a ``Server-Timing`` header on each answer of a known
    route but those in ``untimed``, ``own`` first (nothing while it is off)."""
    if not enabled():
        return []

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        resource = request.match_info.route.resource
        if resource is None or resource.canonical in untimed:
            return await handler(request)
        started = time.perf_counter()
        with collecting() as entries:
            response = await handler(request)
            if not response.prepared:  # headers not sent yet (a streamed answer's are)
                response.headers.add("Server-Timing", answered(entries, own, started))
            return response

    return [middleware]
