"""Every model's batcher, each made when its first request comes (:class:`Batchers`)."""

from __future__ import annotations

import asyncio
import logging

from batcher.inflight import InFlight
from batcher.scheduler import ModelBatcher, Settings, Upstream

logger = logging.getLogger(__name__)

# How long the first request for a model may wait for the upstream's model config.
CONFIG_TIMEOUT_S = 5.0


class Batchers:
    """One ModelBatcher per (model, version), made on its first request from the upstream config."""

    def __init__(self, upstream: Upstream, settings: Settings, inflight: InFlight) -> None:
        self.upstream = upstream
        self.settings = settings
        self.inflight = inflight
        self._batchers: dict[tuple[str, str], ModelBatcher] = {}
        self._creating: dict[tuple[str, str], asyncio.Task[ModelBatcher]] = {}

    async def get(self, model: str, version: str, time_left: float | None) -> ModelBatcher:
        key = (model, version)
        batcher = self._batchers.get(key)
        if batcher is not None:
            return batcher
        task = self._creating.get(key)
        if task is None:
            timeout = CONFIG_TIMEOUT_S if time_left is None else min(time_left, CONFIG_TIMEOUT_S)
            task = asyncio.get_running_loop().create_task(self._create(model, version, timeout))
            self._creating[key] = task
            task.add_done_callback(lambda _: self._creating.pop(key, None))
        return await asyncio.shield(task)  # one caller leaving does not cancel it for the others

    async def _create(self, model: str, version: str, time_left: float) -> ModelBatcher:
        upstream_max = await self.upstream.max_batch_size(model, version, time_left)
        override = self.settings.max_batch_size
        size = min(override, upstream_max) if override and upstream_max else upstream_max
        if override and upstream_max and override > upstream_max:
            logger.warning(
                "%s: max_batch_size %d is above the upstream's %d; using %d",
                model,
                override,
                upstream_max,
                size,
            )
        label = f"{model}:{version}" if version else model
        batcher = ModelBatcher(label, size, self.settings, self.inflight, self.upstream)
        self._batchers[(model, version)] = batcher
        logger.info(
            "%s: batches of up to %d items (%s), max_queue_delay %.3g ms, queue of %d, "
            "%d batch(es) in flight to %s",
            label,
            size,
            "set here" if override and size == override else "upstream model config",
            self.settings.max_queue_delay_s * 1000,
            self.settings.max_queue,
            self.inflight.limit,
            self.upstream.name,
        )
        return batcher

    async def close(self) -> None:
        for task in self._creating.values():
            task.cancel()
        await asyncio.gather(*(b.close() for b in self._batchers.values()))
