"""A request with a client-chosen W3C ``traceparent``, through a stack's public endpoint: what
the tracing tests send (the pipeline honours the caller's sampled flag at any ratio)."""

from __future__ import annotations

import secrets

from demo_client.client import open_clients
from demo_client.load import image_requests
from demo_client.transports import GRPC, Transport
from inferline_stack.config import StackConfig
from inferline_testing import media


def traceparent(trace_id: str, parent_id: str, sampled: bool) -> str:
    """``traceparent`` for a trace (32 hex digits) whose caller's span is ``parent_id`` (16)."""
    return f"00-{trace_id}-{parent_id}-{'01' if sampled else '00'}"


def unsampled() -> str:
    """A ``traceparent`` of a new trace the caller does not sample."""
    return traceparent(secrets.token_hex(16), secrets.token_hex(8), sampled=False)


async def classify(
    config: StackConfig, header: str, transport: Transport = GRPC, image: bytes | None = None
) -> None:
    """One image (a small photo unless given) classified through ``config``'s public endpoint,
    ``header`` its ``traceparent``."""
    if image is None:
        image = media.encode(media.photo("chelsea")[:96, :128])
    factory = image_requests([image], 1, transport)
    request = factory(0)
    target = f"127.0.0.1:{config.public_port}"
    async with open_clients(target, transport=transport) as (client,):
        await client.infer(
            "classifier",
            list(request.inputs),
            outputs=list(request.outputs),
            headers={"traceparent": header},
            client_timeout=10,
        )
