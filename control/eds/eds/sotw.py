"""State-of-the-world xDS, one stream: subscriptions, versions, nonces, ACK and NACK.

Pure: requests in, responses out, no gRPC and no waiting. Per type URL the stream keeps the
names the client wants, the nonce and version of the last response, and the last version
the client acknowledged. A response is sent when the client subscribes or changes its
names, and when the content of its subscription changes. A NACK is reported and the
rejected version is *not* sent again: the next response carries the next change, so a bad
update is never resent in a loop, and the client stays on its last good version.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

from envoy_data_plane.envoy.service.discovery.v3 import DiscoveryRequest, DiscoveryResponse

from eds.resources import FULL_STATE_TYPES, Snapshot, XdsResource, set_version
from eds.streams import Kind, Stream, StreamEvent


@dataclass
class _Subscription:
    names: frozenset[str]
    wildcard: bool
    nonce: str = ""  # of the last response sent
    sent_version: str | None = None
    sent_at: float = 0.0
    acked_version: str = ""
    needs_response: bool = True


def _wildcard(type_url: str, names: Collection[str]) -> bool:
    # Only Listener and Cluster have the legacy "no names means everything" wildcard; an EDS
    # request with no names means "none" (Envoy sends one when its last EDS cluster goes).
    return "*" in names or (type_url in FULL_STATE_TYPES and not names)


class SotwStream(Stream[_Subscription]):
    def acked_version(self, type_url: str) -> str:
        sub = self._subs.get(type_url)
        return sub.acked_version if sub else ""

    def on_request(self, request: DiscoveryRequest) -> StreamEvent:
        type_url = self._type_of(request)
        names = frozenset(request.resource_names)
        ordered = tuple(sorted(names))

        base = StreamEvent(Kind.SUBSCRIBE, type_url, self.node_id, names=ordered)
        if type_url not in self.types:
            return replace(base, kind=Kind.UNSUPPORTED)
        sub = self._subs.get(type_url)
        if sub is None:
            self._subs[type_url] = _Subscription(names, _wildcard(type_url, names))
            return replace(base, version=request.version_info)
        if request.response_nonce and request.response_nonce != sub.nonce:
            return replace(base, kind=Kind.STALE)
        if names != sub.names or _wildcard(type_url, names) != sub.wildcard:
            sub.names, sub.wildcard = names, _wildcard(type_url, names)
            sub.needs_response = True
        if not request.response_nonce:
            return replace(base, kind=Kind.UPDATE)
        nack = self._nack(base, request, sub.sent_at, sub.sent_version or "")
        if nack is not None:
            return nack
        latency = self._clock() - sub.sent_at
        sub.acked_version = request.version_info
        return replace(base, kind=Kind.ACK, version=request.version_info, latency_s=latency)

    def responses(self, snapshot: Snapshot) -> list[DiscoveryResponse]:
        """The responses the client needs now (none while the cache is not ready)."""
        if not snapshot.ready:
            return []
        out = []
        for type_url, sub in self._subs.items():
            available = snapshot.of_type(type_url)
            chosen: list[XdsResource]
            if sub.wildcard:
                chosen = [available[n] for n in sorted(available)]
            else:
                chosen = [available[n] for n in sorted(sub.names) if n in available]
            version = set_version(chosen)
            if not sub.needs_response and version == sub.sent_version:
                continue
            sub.nonce = self._nonces.next()
            sub.sent_version, sub.sent_at, sub.needs_response = version, self._clock(), False
            out.append(
                DiscoveryResponse(
                    version_info=version,
                    resources=[r.packed() for r in chosen],
                    type_url=type_url,
                    nonce=sub.nonce,
                )
            )
        return out
