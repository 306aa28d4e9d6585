"""Wires configuration to the upstream, the batchers and the gRPC server; for __main__ and tests."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from batcher import metrics
from batcher.batchers import Batchers
from batcher.config import Config
from batcher.inflight import InFlight
from batcher.scheduler import Settings
from batcher.service import BatcherService
from batcher.upstream import SERVICE, Upstream
from inferline import capacity
from inferline.server import RunningServer, start_server
from inferline.tls import health_port, server_tls

logger = logging.getLogger(__name__)


@dataclass
class Batcher:
    server: RunningServer
    upstream: Upstream
    batchers: Batchers

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace: float) -> None:
        """NOT_SERVING, let calls in flight finish within ``grace``, then close the upstream."""
        await self.server.stop(grace)
        await self.batchers.close()
        await self.upstream.close()


def build(config: Config) -> BatcherService:
    """The service and what it holds (upstream channel, batchers), not yet serving."""
    upstream = Upstream(config.upstream_url, config.max_message_bytes)
    settings = Settings(
        max_batch_size=config.max_batch_size,
        max_queue_delay_s=config.max_queue_delay_ms / 1000.0,
        max_queue=config.max_queue,
        default_timeout_s=config.upstream_timeout_s,
        max_queue_bytes=config.max_queue_bytes,
        # Requests merged into one message: no more than the message limit, less one hop's
        # framing (a merged message is smaller than its requests' sum: one header for all).
        max_batch_bytes=config.max_message_bytes - capacity.FRAMING_BYTES,
    )
    batchers = Batchers(upstream, settings, InFlight(config.max_inflight, config.adaptive_inflight))
    metrics.QUEUE_CAPACITY.set(config.max_queue)
    return BatcherService(upstream, batchers, config.upstream_timeout_s)


async def start(config: Config) -> Batcher:
    """Serve the batcher as ``python -m batcher`` does: health, reflection, RPC metrics."""
    service = build(config)
    server = await start_server(
        "batcher",
        config.port,
        [lambda s: s.add_generic_rpc_handlers((service.handler(),))],
        [SERVICE],
        host=config.host,
        max_message_bytes=config.max_message_bytes,
        tls=server_tls(config),
        health_port=health_port(config),
        timing_as="",  # each request's queue and batch, and the GPU pod's parts
    )
    logger.info(
        "batching for upstream %s: max_batch_size %s, max_queue_delay %.3g ms, "
        "max_queue %d, max_inflight %d",
        config.upstream_url,
        config.max_batch_size or "from the upstream",
        config.max_queue_delay_ms,
        config.max_queue,
        config.max_inflight,
    )
    return Batcher(server, service.upstream, service.batchers)
