"""Closed-loop load: ``concurrency`` workers, each sending one request at a time."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc.aio import InferInput, InferRequestedOutput
from tritonclient.utils import InferenceServerException

from demo_client.client import status_name
from demo_client.stats import Recorder, Summary

logger = logging.getLogger(__name__)

INPUT_NAME = "IMAGE"
OUTPUT_NAME = "PROBABILITIES"


@dataclass(frozen=True)
class LoadConfig:
    """One run. It ends after ``duration_s`` seconds or ``count`` requests, whichever is first."""

    model: str = "classifier"
    concurrency: int = 8
    batch: int = 1
    timeout_s: float = 10.0
    duration_s: float | None = 30.0
    count: int | None = None

    def __post_init__(self) -> None:
        for name in ("concurrency", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        if self.duration_s is None and self.count is None:
            raise ValueError("a run needs a duration or a count")
        if self.duration_s is not None and self.duration_s <= 0:
            raise ValueError("duration_s must be positive")
        if self.count is not None and self.count < 1:
            raise ValueError("count must be at least 1")


def make_inputs(images: Sequence[bytes]) -> list[Any]:
    """The ``IMAGE`` input: a BYTES tensor of shape [N], one encoded file per element."""
    tensor = InferInput(INPUT_NAME, [len(images)], "BYTES")
    tensor.set_data_from_numpy(np.array(list(images), dtype=np.object_))
    return [tensor]


class Requests:
    """Hands out request numbers and the images of each request, cycling through the set.

    Request ``r`` carries images ``r*batch … r*batch+batch-1`` (mod the set size), so a
    run's mix of images is the same whatever the concurrency. Inputs are serialised once
    per distinct batch and reused.
    """

    def __init__(self, images: Sequence[bytes], batch: int, count: int | None) -> None:
        if not images:
            raise ValueError("no images to send")
        self._images = list(images)
        self._batch = batch
        self._count = count
        self._next = 0
        self._inputs: dict[int, list[Any]] = {}

    def take(self) -> tuple[list[Any], int] | None:
        """The next request's inputs and image count, or ``None`` once ``count`` are out."""
        if self._count is not None and self._next >= self._count:
            return None
        start = (self._next * self._batch) % len(self._images)
        self._next += 1
        inputs = self._inputs.get(start)
        if inputs is None:
            n = len(self._images)
            inputs = make_inputs([self._images[(start + i) % n] for i in range(self._batch)])
            self._inputs[start] = inputs
        return inputs, self._batch


async def _send(client: Any, config: LoadConfig, inputs: list[Any], images: int) -> str | None:
    """One request; ``None`` on success, else the status code name of its failure."""
    try:
        result = await client.infer(
            config.model,
            inputs,
            outputs=[InferRequestedOutput(OUTPUT_NAME)],
            client_timeout=config.timeout_s,
        )
        output = result.as_numpy(OUTPUT_NAME)
    except InferenceServerException as exc:
        logger.debug("request failed: %s", exc)
        return status_name(exc)
    except Exception:  # the run outlives any one request; the count shows it happened
        logger.debug("request failed in the client", exc_info=True)
        return "CLIENT_ERROR"
    if output is None or output.ndim != 2 or output.shape[0] != images:
        logger.debug("bad response: %s", None if output is None else output.shape)
        return "BAD_RESPONSE"
    return None


async def _worker(
    client: Any,
    config: LoadConfig,
    requests: Requests,
    recorder: Recorder,
    deadline: float | None,
) -> None:
    loop = asyncio.get_running_loop()
    while deadline is None or loop.time() < deadline:
        job = requests.take()
        if job is None:
            return
        inputs, images = job
        started = time.perf_counter()
        error = await _send(client, config, inputs, images)
        if error is None:
            recorder.record_ok(time.perf_counter() - started, images)
        else:
            recorder.record_error(error)


async def run_load(
    clients: Sequence[Any],
    config: LoadConfig,
    images: Sequence[bytes],
    recorder: Recorder,
    stop: asyncio.Event | None = None,
) -> Summary:
    """Run the load on ``clients`` (worker ``i`` uses ``clients[i % len]``); summarise it.

    Ends at the deadline or the count (requests in flight finish, bounded by their
    timeout), or at once when ``stop`` is set (requests in flight are abandoned).
    """
    if not clients:
        raise ValueError("no clients")
    requests = Requests(images, config.batch, config.count)
    loop = asyncio.get_running_loop()
    recorder.start()
    deadline = None if config.duration_s is None else loop.time() + config.duration_s
    workers = [
        asyncio.create_task(
            _worker(clients[i % len(clients)], config, requests, recorder, deadline),
            name=f"load-worker-{i}",
        )
        for i in range(config.concurrency)
    ]
    finished = asyncio.ensure_future(asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION))
    stopped = asyncio.ensure_future((stop or asyncio.Event()).wait())
    try:
        await asyncio.wait({finished, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        recorder.stop()
        stopped.cancel()
        for task in workers:
            task.cancel()
        await asyncio.wait(workers)
        await finished
    for task in workers:
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error  # a bug in a worker, not a failed request
    return recorder.summary()
