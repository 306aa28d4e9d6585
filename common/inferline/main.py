"""The ``__main__`` of every service: logging, config, ``/metrics``, serve until SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from opentelemetry.sdk.trace.sampling import Sampler

from inferline import logs, tracing
from inferline.config import ConfigError, load
from inferline.metrics import start_metrics_server
from inferline.server import wait_for_signal

logger = logging.getLogger(__name__)


class ServiceConfig(Protocol):
    @property
    def host(self) -> str: ...

    @property
    def metrics_port(self) -> int: ...

    @property
    def grace_s(self) -> float: ...


class Running(Protocol):
    async def stop(self, grace: float) -> None: ...


C = TypeVar("C", bound=ServiceConfig)


async def serve(config: C, start: Callable[[C], Awaitable[Running]]) -> None:
    """Serve ``/metrics`` and the service until SIGTERM/SIGINT, then stop it gracefully.

    ``/metrics`` listens on the service's own address (``HOST``), never wider: on loopback in
    the local stack, on the pod's addresses in Kubernetes (where Prometheus scrapes it)."""
    metrics, _ = await start_metrics_server(config.metrics_port, config.host)
    try:
        running = await start(config)
        received = await wait_for_signal()
        logger.info("%s: NOT_SERVING, stopping with %.1fs grace", received.name, config.grace_s)
        await running.stop(config.grace_s)
        logger.info("stopped")
    finally:
        await metrics.cleanup()


def run(
    name: str,
    config_type: type[C],
    prefix: str,
    start: Callable[[C], Awaitable[Running]],
    description: str | None = None,
    fatal: tuple[type[Exception], ...] = (),
    sampler: Sampler | None = None,
) -> None:
    """``python -m <name>``: a bad configuration or a start-up failure exits with one line.
    ``sampler``: its traces' sampler when ``OTEL_TRACES_SAMPLER`` names none (default: the
    pipeline's, :func:`inferline.tracing.provider`)."""
    logs.setup()
    tracing.setup(name, sampler)
    expected: tuple[type[Exception], ...] = (ConfigError, OSError, *fatal)
    try:
        prog = f"python -m {name}"
        config = load(config_type, prefix, sys.argv[1:], description=description, prog=prog)
        asyncio.run(serve(config, start))
    except expected as error:
        sys.exit(f"{name}: {error}")
