"""Incremental (delta) xDS, one stream: per-resource versions, subscribe and unsubscribe.

Pure: requests in, responses out. Per type URL the stream tracks what the client holds
(name -> version, seeded from ``initial_resource_versions`` when it reconnects) and sends
only resources whose version differs, plus the names that no longer exist. What was sent
counts as held whether the client ACKs or NACKs it, so a rejected update is reported and
never resent; the next change of that resource goes out as usual.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from envoy_data_plane.envoy.service.discovery.v3 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    Resource,
)

from eds.resources import FULL_STATE_TYPES, Snapshot, set_version
from eds.streams import Kind, Stream, StreamEvent

ABSENT = ""  # "the client has been told this name does not exist"


@dataclass
class _Subscription:
    names: set[str] = field(default_factory=set)
    wildcard: bool = False
    known: dict[str, str] = field(default_factory=dict)  # what the client holds
    nonce: str = ""
    sent_at: float = 0.0
    sent_version: str = ""


class DeltaStream(Stream[_Subscription]):
    def known(self, type_url: str) -> dict[str, str]:
        """What the client holds of ``type_url``, name -> version, as far as this stream knows."""
        sub = self._subs.get(type_url)
        return dict(sub.known) if sub else {}

    def on_request(self, request: DeltaDiscoveryRequest) -> StreamEvent:
        type_url = self._type_of(request)
        base = StreamEvent(Kind.UPDATE, type_url, self.node_id)
        if type_url not in self.types:
            return replace(base, kind=Kind.UNSUPPORTED)
        sub = self._subs.get(type_url)
        first = sub is None
        if sub is None:
            sub = _Subscription(known=dict(request.initial_resource_versions))
            # The legacy wildcard: a first Listener or Cluster request that names nothing.
            sub.wildcard = type_url in FULL_STATE_TYPES and not request.resource_names_subscribe
            self._subs[type_url] = sub
        for name in request.resource_names_subscribe:
            if name == "*":
                sub.wildcard = True
                continue
            sub.names.add(name)
            if not first:  # a (re)subscription must be answered even if the client has it
                sub.known.pop(name, None)
        for name in request.resource_names_unsubscribe:
            if name == "*":
                sub.wildcard = False
                continue
            sub.names.discard(name)
            sub.known.pop(name, None)
        base = replace(base, names=tuple(sorted(sub.names)))
        if first:
            return replace(base, kind=Kind.SUBSCRIBE)
        if not request.response_nonce:
            return base
        if request.response_nonce != sub.nonce:
            return replace(base, kind=Kind.STALE)
        nack = self._nack(base, request, sub.sent_at, sub.sent_version)
        if nack is not None:
            return nack
        latency = self._clock() - sub.sent_at
        return replace(base, kind=Kind.ACK, version=sub.sent_version, latency_s=latency)

    def responses(self, snapshot: Snapshot) -> list[DeltaDiscoveryResponse]:
        """Changed and removed resources of every subscription (none while not ready)."""
        if not snapshot.ready:
            return []
        out = []
        for type_url, sub in self._subs.items():
            available = snapshot.of_type(type_url)
            scope = set(sub.names)
            if sub.wildcard:
                scope |= set(available) | {n for n, v in sub.known.items() if v != ABSENT}
            changed = [
                available[n]
                for n in sorted(scope)
                if n in available and sub.known.get(n) != available[n].version
            ]
            removed = [
                n for n in sorted(scope) if n not in available and sub.known.get(n) != ABSENT
            ]
            if not changed and not removed:
                continue
            for r in changed:
                sub.known[r.name] = r.version
            for name in removed:
                sub.known[name] = ABSENT
            sub.nonce = self._nonces.next()
            sub.sent_at = self._clock()
            sub.sent_version = set_version(available.values())
            out.append(
                DeltaDiscoveryResponse(
                    system_version_info=sub.sent_version,
                    resources=[
                        Resource(name=r.name, version=r.version, resource=r.packed())
                        for r in changed
                    ],
                    type_url=type_url,
                    removed_resources=removed,
                    nonce=sub.nonce,
                )
            )
        return out
