"""What the xDS stream state machines report about each request (pure; no gRPC)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


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


class Nonces:
    """Per-stream nonces: unique within the stream, across every type."""

    def __init__(self) -> None:
        self._next = 0

    def next(self) -> str:
        self._next += 1
        return str(self._next)
