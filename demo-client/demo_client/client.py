"""KServe v2 clients: opening them, readiness, and error names (the one place that knows them)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tritonclient.utils import InferenceServerException

from demo_client.transports import GRPC, ClientTls, Transport

logger = logging.getLogger(__name__)

POLL_INTERVAL_S = 0.25


class NotReadyError(Exception):
    """The server or the model did not become ready in time."""


def status_name(exc: InferenceServerException) -> str:
    """The status of a client error: a gRPC code's name (``UNAVAILABLE``), an HTTP status
    (``503``), or ``CLIENT_ERROR``."""
    status = exc.status()
    if not status:
        return "CLIENT_ERROR"
    return str(status).removeprefix("StatusCode.")


def describe(exc: InferenceServerException) -> str:
    """A one-line, human-readable account of a client error."""
    message = exc.message() or str(exc)
    return f"{status_name(exc)}: {message}"


@asynccontextmanager
async def open_clients(
    target: str,
    channels: int = 1,
    transport: Transport = GRPC,
    tls: ClientTls | None = None,
    token: str | None = None,
) -> AsyncIterator[list[Any]]:
    """``channels`` clients to ``target``, each with its own channel (gRPC) or connection pool
    (HTTP), over TLS when ``tls`` is given, every call with the bearer ``token`` when one is;
    closed on exit."""
    clients = [transport.open(target, tls, token) for _ in range(channels)]
    try:
        yield clients
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


async def _check(client: Any, model: str, timeout_s: float) -> str | None:
    """``None`` when server and model are ready, else why not."""
    try:
        if not await client.is_server_ready(client_timeout=timeout_s):
            return "the server is not ready"
        if not await client.is_model_ready(model, client_timeout=timeout_s):
            served = await _served(client, timeout_s)
            if served is not None and model not in served:  # no use waiting for it
                raise NotReadyError(
                    f"model {model!r} is not served there; it serves {', '.join(served)}"
                )
            return f"model {model!r} is not ready"
    except InferenceServerException as exc:
        return describe(exc)
    return None


async def _served(client: Any, timeout_s: float) -> list[str] | None:
    """The models the server lists (RepositoryIndex), or None when it lists none."""
    try:
        index = await client.get_model_repository_index(client_timeout=timeout_s)
    except InferenceServerException:
        return None
    return [m.name for m in index.models]


async def wait_ready(client: Any, target: str, model: str, wait_s: float) -> None:
    """Poll ServerReady and ModelReady until both say yes; ``NotReadyError`` after ``wait_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while True:
        remaining = deadline - loop.time()
        reason = await _check(client, model, timeout_s=min(max(remaining, 1.0), 5.0))
        if reason is None:
            return
        remaining = deadline - loop.time()
        if remaining <= 0:
            raise NotReadyError(f"{target} is not ready after {wait_s:g} s ({reason})")
        logger.debug("waiting for %s: %s", target, reason)
        await asyncio.sleep(min(POLL_INTERVAL_S, remaining))
