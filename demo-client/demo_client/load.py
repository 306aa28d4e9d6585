"""Load on a KServe v2 endpoint, in one of two arrival modes.

* closed loop (``LoadConfig.rate`` is ``None``): ``concurrency`` workers, each sending one
  request at a time — throughput at a given number of requests in flight;
* open loop (``rate`` requests/s): Poisson arrivals, each request its own task, whatever the
  answers do — latency at a given offered load. At most ``concurrency`` requests are in flight;
  an arrival that finds them all busy waits for one, and its latency counts from when it was due.

What a request carries comes from a *request factory* (request number → :class:`InferRequest`):
:func:`image_requests` (the default: encoded images in the classifier's ``IMAGE`` input) or
:func:`tensor_requests` (one raw tensor, for a model that takes pixels). How each request ended
goes to the :class:`~demo_client.stats.Recorder`, and as an :class:`Outcome` to a hook when one
is given. A run ends by its duration or count, or when told to stop (:func:`running`: when an
``async with`` block ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from demo_client.client import status_name
from demo_client.stats import Recorder, Summary
from demo_client.transports import GRPC, Transport

logger = logging.getLogger(__name__)

INPUT_NAME = "IMAGE"
OUTPUT_NAME = "PROBABILITIES"


@dataclass(frozen=True)
class LoadConfig:
    """One run: ``warmup_s`` seconds of load that is sent but not recorded, then ``duration_s``
    measured seconds or ``count`` requests in all (warm-up included), whichever ends first.

    ``rate`` (requests/s) makes it an open loop, ``seed`` fixes its arrival times; ``concurrency``
    is the number of workers of a closed loop and the most requests an open loop has in flight.
    ``batch`` is the number of images per request when the run sends images.
    """

    model: str = "classifier"
    concurrency: int = 8
    batch: int = 1
    timeout_s: float = 10.0
    duration_s: float | None = 30.0
    count: int | None = None
    rate: float | None = None
    seed: int | None = None
    warmup_s: float = 0.0

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
        if self.rate is not None and not self.rate > 0:
            raise ValueError("rate must be positive (or None for a closed loop)")
        if not self.warmup_s >= 0:
            raise ValueError("warmup_s must be 0 or more")


@dataclass(frozen=True)
class InferRequest:
    """What one request carries: tritonclient ``InferInput``s, the ``InferRequestedOutput``s it
    asks for, and how many items it counts — the first requested output must have that many
    rows, or the request counts as ``BAD_RESPONSE``. ``on_answer``, when set, gets that output
    of each successful answer (the web view's labels)."""

    inputs: Sequence[Any]
    outputs: Sequence[Any]
    items: int
    on_answer: Callable[[npt.NDArray[Any]], None] | None = None

    def __post_init__(self) -> None:
        if not self.outputs:
            raise ValueError("a request asks for at least one output (the one checked)")
        if self.items < 1:
            raise ValueError("a request counts at least one item")


RequestFactory = Callable[[int], InferRequest]
"""Request number (0, 1, …) → what that request carries."""


@dataclass(frozen=True)
class Outcome:
    """How one request ended: sent at ``sent`` (loop time; an open loop's request: when it was
    due), it ended ``latency_s`` later, answered (``error`` None) or failed with that status code
    name, saying ``message``."""

    sent: float
    latency_s: float
    error: str | None
    message: str = ""


OutcomeHook = Callable[[Outcome], None]
"""Called with the :class:`Outcome` of every request the recorder records."""


def make_inputs(images: Sequence[bytes], transport: Transport = GRPC) -> list[Any]:
    """The ``IMAGE`` input: a BYTES tensor of shape [N], one encoded file per element."""
    tensor = transport.infer_input(INPUT_NAME, [len(images)], "BYTES")
    tensor.set_data_from_numpy(np.array(list(images), dtype=np.object_))
    return [tensor]


def image_requests(
    images: Sequence[bytes], batch: int = 1, transport: Transport = GRPC
) -> RequestFactory:
    """The classifier's requests: ``batch`` encoded images in ``IMAGE``, asking for
    ``PROBABILITIES``; ``batch`` items each.

    Request ``r`` carries images ``r*batch … r*batch+batch-1`` (mod the set size), so a run's
    mix of images is the same whatever the concurrency. Inputs are serialised once per distinct
    batch and reused.
    """
    if not images:
        raise ValueError("no images to send")
    if batch < 1:
        raise ValueError("batch must be at least 1")
    pool = list(images)
    outputs = [transport.requested_output(OUTPUT_NAME)]
    made: dict[int, InferRequest] = {}

    def request(number: int) -> InferRequest:
        start = (number * batch) % len(pool)
        found = made.get(start)
        if found is None:
            chosen = [pool[(start + i) % len(pool)] for i in range(batch)]
            found = made[start] = InferRequest(make_inputs(chosen, transport), outputs, batch)
        return found

    return request


def tensor_requests(input_name: str, tensor: npt.NDArray[Any], output_name: str) -> RequestFactory:
    """Every request carries ``tensor`` as ``input_name`` (datatype from its dtype, e.g. UINT8
    ``[1, 3, 224, 224]`` for a model that takes pixels) and asks for ``output_name``; its first
    dimension is the batch, the items counted. gRPC (the benchmarks' inner hops speak only
    that)."""
    if tensor.ndim < 1 or tensor.shape[0] < 1:
        raise ValueError("the tensor's first dimension is the batch: at least one item")
    datatype = np_to_triton_dtype(tensor.dtype)
    if datatype is None:
        raise ValueError(f"no KServe datatype for {tensor.dtype}")
    tensor_input = GRPC.infer_input(input_name, list(tensor.shape), datatype)
    tensor_input.set_data_from_numpy(tensor)
    outputs = [GRPC.requested_output(output_name)]
    request = InferRequest([tensor_input], outputs, tensor.shape[0])
    return lambda number: request


class Requests:
    """Numbers a run's requests and hands out what each carries, until ``count`` are out."""

    def __init__(self, factory: RequestFactory, count: int | None = None) -> None:
        self._factory = factory
        self._count = count
        self.taken = 0  # requests handed out so far: the next one's number

    def take(self) -> InferRequest | None:
        """The next request, or ``None`` once ``count`` are out."""
        if self._count is not None and self.taken >= self._count:
            return None
        number = self.taken
        self.taken += 1
        return self._factory(number)


def poisson_arrivals(rate: float, seed: int | None = None) -> Iterator[float]:
    """Arrival times (seconds from the start) of a Poisson process of ``rate`` per second;
    the same ``seed`` gives the same times."""
    rng = random.Random(seed)
    at = 0.0
    while True:
        at += rng.expovariate(rate)
        yield at


async def send(
    client: Any, model: str, request: InferRequest, timeout_s: float
) -> tuple[str | None, str]:
    """One request; ``(None, "")`` on success, else the status code name of its failure and
    what it said (``BAD_RESPONSE``: the first requested output does not have ``request.items``
    rows)."""
    name = request.outputs[0].name()
    try:
        result = await client.infer(
            model, list(request.inputs), outputs=list(request.outputs), client_timeout=timeout_s
        )
        output = result.as_numpy(name)
    except InferenceServerException as exc:
        logger.debug("request failed: %s", exc)
        return status_name(exc), exc.message() or str(exc)
    except Exception as exc:  # the run outlives any one request; the count shows it happened
        logger.debug("request failed in the client", exc_info=True)
        return "CLIENT_ERROR", repr(exc)
    if output is None or output.ndim == 0 or output.shape[0] != request.items:
        shape = None if output is None else output.shape
        logger.debug("bad response: %s", shape)
        return "BAD_RESPONSE", f"{name} has shape {shape}, not {request.items} rows"
    if request.on_answer is not None:
        request.on_answer(output)
    return None, ""


class Backoff:
    """How long a closed-loop worker pauses after the server refused it for load: doubling from
    ``first_s`` to ``most_s``, with full jitter (a random share of it, so refused workers do not
    come back in step), and reset by any other answer — what a well-behaved client does, since
    coming straight back only spends the server's CPU on more refusals."""

    def __init__(self, first_s: float = 0.1, most_s: float = 10.0) -> None:
        self.first_s, self.most_s = first_s, most_s
        self.next_s = first_s

    def after(self, error: str | None) -> float:
        """The pause before the next request, given how the last one ended."""
        if error != "RESOURCE_EXHAUSTED":
            self.next_s = self.first_s
            return 0.0
        pause = random.uniform(0.0, self.next_s)
        self.next_s = min(self.next_s * 2, self.most_s)
        return pause


@dataclass(frozen=True)
class _Run:
    """What a run's generators share."""

    clients: Sequence[Any]
    config: LoadConfig
    requests: Requests
    recorder: Recorder
    measure_from: float  # loop time: requests sent (closed) or due (open) from here count
    deadline: float | None  # loop time: none sent or due from here
    stop: asyncio.Event  # set: none sent from now on
    on_outcome: OutcomeHook | None

    def record(self, sent: float, items: int, error: str | None, message: str) -> None:
        """A request sent (or due) at ``sent`` has ended, now."""
        latency_s = asyncio.get_running_loop().time() - sent
        if error is None:
            self.recorder.record_ok(latency_s, items)
        else:
            self.recorder.record_error(error, latency_s)
        if self.on_outcome is not None:
            self.on_outcome(Outcome(sent, latency_s, error, message))


async def _worker(run: _Run, client: Any) -> None:
    """Closed loop: one request at a time until the deadline, the count or the stop, pausing
    (Backoff) after a refusal for load."""
    loop = asyncio.get_running_loop()
    backoff = Backoff()
    while not run.stop.is_set() and (run.deadline is None or loop.time() < run.deadline):
        request = run.requests.take()
        if request is None:
            return
        sent = loop.time()
        error, message = await send(client, run.config.model, request, run.config.timeout_s)
        if sent >= run.measure_from:
            run.record(sent, request.items, error, message)
        pause = backoff.after(error)
        if pause:
            await asyncio.sleep(pause)


async def _arrivals(run: _Run, rate: float) -> None:
    """Open loop: a task per arrival until the deadline, the count or the stop; then the ones in
    flight finish (each bounded by its timeout)."""
    loop = asyncio.get_running_loop()
    slots = asyncio.Semaphore(run.config.concurrency)
    in_flight: set[asyncio.Task[None]] = set()
    failures: list[BaseException] = []

    async def one(client: Any, request: InferRequest, due: float) -> None:
        try:
            error, message = await send(client, run.config.model, request, run.config.timeout_s)
            if due >= run.measure_from:
                run.record(due, request.items, error, message)
        finally:
            slots.release()

    def finished(task: asyncio.Task[None]) -> None:
        in_flight.discard(task)
        if not task.cancelled() and (error := task.exception()) is not None:
            failures.append(error)

    start = loop.time()
    try:
        for offset in poisson_arrivals(rate, run.config.seed):
            due = start + offset
            if run.deadline is not None and due >= run.deadline:
                break
            early = due - loop.time()
            if early > 0:
                await asyncio.sleep(early)
            held = slots.locked()
            await slots.acquire()
            request = None if run.stop.is_set() else run.requests.take()
            if request is None:
                slots.release()
                break
            if (early <= 0 or held) and due >= run.measure_from:
                run.recorder.record_late(loop.time() - due)
            client = run.clients[(run.requests.taken - 1) % len(run.clients)]
            task = asyncio.create_task(one(client, request, due))
            in_flight.add(task)
            task.add_done_callback(finished)
            if failures:
                break
        if in_flight:
            await asyncio.wait(set(in_flight))
    finally:
        for task in in_flight:
            task.cancel()
        if in_flight:
            await asyncio.wait(set(in_flight))
    if failures:
        raise failures[0]  # a bug in the client, not a failed request


async def run_load(
    clients: Sequence[Any],
    config: LoadConfig,
    requests: Sequence[bytes] | RequestFactory,
    recorder: Recorder,
    stop: asyncio.Event | None = None,
    *,
    drain: bool = False,
    on_outcome: OutcomeHook | None = None,
) -> Summary:
    """Run the load on ``clients`` and summarise it.

    ``requests``: encoded images (the classifier's requests, ``config.batch`` images each: see
    :func:`image_requests`) or a :data:`RequestFactory`. Closed-loop worker ``i`` uses
    ``clients[i % len]``, open-loop request ``r`` ``clients[r % len]``.

    The recorder measures from the end of the warm-up to the deadline: requests sent (closed
    loop) or due (open loop) in that window are recorded, including those that finish after it,
    so images/s is what was sent in the window over its length; ``on_outcome`` gets each of them
    too. The run ends at the deadline or the count (requests in flight finish, bounded by their
    timeout), or when ``stop`` is set: at once (requests in flight are abandoned), or with
    ``drain`` once the requests in flight have finished and been recorded, none sent after it
    (a closed-loop worker pausing after a refusal for load ends its pause first).
    """
    if not clients:
        raise ValueError("no clients")
    factory = requests if callable(requests) else image_requests(requests, config.batch)
    loop = asyncio.get_running_loop()
    measure_from = loop.time() + config.warmup_s
    deadline = None if config.duration_s is None else measure_from + config.duration_s
    stop = asyncio.Event() if stop is None else stop
    numbered = Requests(factory, config.count)
    run = _Run(clients, config, numbered, recorder, measure_from, deadline, stop, on_outcome)
    timers: list[asyncio.TimerHandle] = []
    if config.warmup_s:
        timers.append(loop.call_at(measure_from, recorder.start))
    else:
        recorder.start()
    if deadline is not None:
        timers.append(loop.call_at(deadline, recorder.stop))
    if config.rate is None:
        generators = [
            asyncio.create_task(_worker(run, clients[i % len(clients)]), name=f"load-worker-{i}")
            for i in range(config.concurrency)
        ]
    else:
        generators = [asyncio.create_task(_arrivals(run, config.rate), name="load-arrivals")]
    finished = asyncio.ensure_future(asyncio.wait(generators, return_when=asyncio.FIRST_EXCEPTION))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({finished, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if drain and not finished.done():
            recorder.stop()  # the window ends at the stop; what is in flight is still recorded
            await finished
    finally:
        for timer in timers:
            timer.cancel()
        recorder.stop()
        stopped.cancel()
        for task in generators:
            task.cancel()
        await asyncio.wait(generators)
        await finished
    for task in generators:
        if not task.cancelled() and (error := task.exception()) is not None:
            raise error  # a bug in the generator, not a failed request
    return recorder.summary()


@contextlib.asynccontextmanager
async def running(
    clients: Sequence[Any],
    config: LoadConfig,
    requests: Sequence[bytes] | RequestFactory,
    recorder: Recorder,
    *,
    drain: bool = False,
    on_outcome: OutcomeHook | None = None,
) -> AsyncIterator[None]:
    """:func:`run_load` while the ``async with`` block runs: leaving the block stops it (with
    ``drain``, once the requests in flight have finished), unless its duration or count has
    ended it before."""
    stop = asyncio.Event()
    run = run_load(clients, config, requests, recorder, stop, drain=drain, on_outcome=on_outcome)
    task = asyncio.create_task(run)
    try:
        yield
    finally:
        stop.set()
        await task
