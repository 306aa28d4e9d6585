"""What the xDS stream state machines report about each request (pure; no gRPC)."""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

Sub = TypeVar("Sub")


class Request(Protocol):
    """What a DiscoveryRequest and a DeltaDiscoveryRequest share."""

    node: Any  # envoy.config.core.v3.Node, sent on a stream's first request
    type_url: str
    error_detail: Any  # google.rpc.Status: set on a NACK


class Kind(enum.StrEnum):
    SUBSCRIBE = "subscribe"  # the first request for a type on a stream
    ACK = "ack"
    NACK = "nack"
    STALE = "stale"  # answers a response that a newer one has replaced: ignored
    UPDATE = "update"  # a changed subscription, not an answer to a response
    UNSUPPORTED = "unsupported"  # a type this endpoint does not serve


@dataclass(frozen=True)
class StreamEvent:
    kind: Kind
    type_url: str
    node_id: str
    version: str = ""  # ACK: the version applied; NACK: the version rejected
    error: str = ""  # NACK: Envoy's error detail
    names: tuple[str, ...] = ()  # the subscription after this request
    latency_s: float | None = None  # ACK/NACK: seconds since that response was sent


class Stream(Generic[Sub]):
    """What both xDS variants (state of the world, delta) keep for one stream: the types it
    serves, the client's node, one subscription per type, the nonces, a clock for latencies."""

    def __init__(
        self,
        types: Collection[str],
        default_type: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.types = frozenset(types)
        self.default_type = default_type
        self.node_id = ""
        self._subs: dict[str, Sub] = {}
        self._nonces = Nonces()
        self._clock = clock

    def _type_of(self, request: Request) -> str:
        """Note the client's node (sent on its first request); the type the request is for."""
        if request.node is not None and request.node.id:
            self.node_id = request.node.id
        return request.type_url or self.default_type

    def _nack(
        self, base: StreamEvent, request: Request, sent_at: float, sent_version: str
    ) -> StreamEvent | None:
        """A NACK of the response sent at ``sent_at`` if ``request`` carries an error, else None."""
        error = request.error_detail
        if error is None or not (error.code or error.message):
            return None
        latency = self._clock() - sent_at
        return replace(
            base, kind=Kind.NACK, version=sent_version, error=error.message, latency_s=latency
        )


class Nonces:
    """Per-stream nonces: unique within the stream, across every type."""

    def __init__(self) -> None:
        self._next = 0

    def next(self) -> str:
        self._next += 1
        return str(self._next)
