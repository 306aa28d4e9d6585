"""How a service dials the next hop: through Envoy's listener for it, or proxyless.

Proxyless (``xds:///<cluster>``, with gRPC's xDS bootstrap in ``GRPC_XDS_BOOTSTRAP`` or
``GRPC_XDS_BOOTSTRAP_CONFIG``): gRPC's own xDS client, fed by the same control plane as Envoy,
balances over the cluster's ready replicas per request (round robin), and the hop keeps what
Envoy would have done for it:

* a replica that hangs: a keepalive PING each second, its connection closed when one goes
  unanswered for a second (Envoy's PINGs to its upstreams); what was in flight on it fails;
* a replica that dies or hangs under a request: that request retried on another, as Envoy
  would (up to three times, backing off), within the retry budget (:mod:`inferline.retry`);
* a replica starting, draining or not ready: the control plane's health (its endpoints'
  EDS status), which gRPC honours.
"""

from __future__ import annotations

import grpc

from inferline import capacity, tracing
from inferline.retry import RetryBudget
from inferline.server import channel_options

SCHEME = "xds:"
KEEPALIVE_MS = 1000  # as Envoy PINGs its upstreams (inferline_envoy's connection_keepalive)


def proxyless(url: str) -> bool:
    return url.startswith(SCHEME)


def channel(url: str, max_message_bytes: int = capacity.INNER_MESSAGE_BYTES) -> grpc.aio.Channel:
    """A channel to ``url``: Envoy's listener (a PING each 30 s), or a proxyless cluster (each
    second: the hop's replicas are reached without Envoy's own PINGs)."""
    keepalive_ms = KEEPALIVE_MS if proxyless(url) else 30000
    return grpc.aio.insecure_channel(
        url,
        options=channel_options(max_message_bytes, keepalive_ms),
        interceptors=tracing.client_interceptors(),
    )


def retry_budget(url: str) -> RetryBudget | None:
    """The budget of the retries this hop makes itself: proxyless only (Envoy retries the rest)."""
    return RetryBudget() if proxyless(url) else None
