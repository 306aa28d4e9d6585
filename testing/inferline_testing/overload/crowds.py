"""A crowd offered to the public endpoint (the demo client's load, closed or open loop), and what
one paced caller sees during it and after it: how fast it is refused, when it recovers."""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from demo_client.client import open_clients
from demo_client.load import LoadConfig, OutcomeHook, run_load
from demo_client.stats import Recorder, Summary, percentiles_ms

# How long the paced caller goes on after a crowd stops sending, unless told: the recovery.
AFTER_S = 10.0


async def offer(
    target: str,
    images: Sequence[bytes],
    *,
    duration_s: float,
    concurrency: int,
    rate: float | None = None,
    timeout_s: float = 5.0,
    channels: int = 4,
    warmup_s: float = 0.0,
    on_outcome: OutcomeHook | None = None,
) -> Summary:
    """The demo client's load: ``concurrency`` closed-loop callers, or (``rate``) an open loop
    with up to ``concurrency`` in flight; every request with a ``timeout_s`` deadline. The first
    ``warmup_s`` seconds are sent but not recorded; ``on_outcome`` gets each recorded one."""
    config = LoadConfig(
        concurrency=concurrency,
        duration_s=duration_s,
        rate=rate,
        timeout_s=timeout_s,
        seed=1,
        warmup_s=warmup_s,
    )
    recorder = Recorder(concurrency=concurrency)
    async with open_clients(target, channels) as clients:
        return await run_load(clients, config, list(images), recorder, on_outcome=on_outcome)


@dataclass(frozen=True)
class Sample:
    sent: float  # loop time
    latency_s: float
    error: str | None


async def paced_calls(
    target: str,
    images: Sequence[bytes],
    duration_s: float,
    pace_s: float = 0.02,
    timeout_s: float = 5.0,
) -> list[Sample]:
    """One caller, one request at a time, at most one every ``pace_s`` (a refused caller that
    came straight back would be a load of its own), keeping each request's send time and
    latency; in a process of its own (:mod:`inferline_testing.paced_caller`), so that a crowd
    generated in this one does not slow what it sees. One caller: two would fall in and out of
    step with each other's batches."""
    with tempfile.TemporaryDirectory(prefix="inferline-paced-") as tmp:
        paths = []
        for i, image in enumerate(images):
            paths.append(Path(tmp) / f"{i}.jpg")
            paths[-1].write_bytes(image)
        argv = ["--target", target, "--duration", str(duration_s), "--pace", str(pace_s)]
        argv += ["--timeout", str(timeout_s), *map(str, paths)]
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "inferline_testing.paced_caller", *argv,
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, _ = await process.communicate()
    if process.returncode:
        raise RuntimeError(f"the paced caller failed (exit {process.returncode})")
    return [Sample(sent, latency, error) for sent, latency, error in json.loads(out)]


def p99_ms(samples: Sequence[Sample], error: str | None = None) -> float | None:
    """p99 latency of the samples that ended with ``error`` (None: the successes)."""
    return percentiles_ms([s.latency_s for s in samples if s.error == error], (99.0,))[0]


def recovered_after(samples: Sequence[Sample], since: float, bound_s: float) -> float | None:
    """Seconds from ``since`` to the first request after which every request succeeded within
    ``bound_s``; None if that never happened."""
    later = [s for s in samples if s.sent >= since]
    for i, sample in enumerate(later):
        if all(s.error is None and s.latency_s <= bound_s for s in later[i:]):
            return sample.sent - since
    return None


@dataclass(frozen=True)
class Spike:
    summary: Summary  # the crowd's own view
    paced: list[Sample]  # one paced caller, from the end of the crowd's warm-up on
    ended: float  # loop time the crowd stopped sending

    @property
    def during(self) -> list[Sample]:
        return [s for s in self.paced if s.sent < self.ended]

    def refusal_p99_ms(self) -> float | None:
        """How fast a caller arriving during the crowd is refused (p99)."""
        return p99_ms(self.during, "RESOURCE_EXHAUSTED")


async def spike(
    target: str,
    images: Sequence[bytes],
    *,
    duration_s: float,
    concurrency: int,
    rate: float | None = None,
    warmup_s: float = 0.0,
    after_s: float = AFTER_S,
) -> Spike:
    """Offer a crowd (:func:`offer`), with a paced caller from the end of its warm-up until
    ``after_s`` after it stopped sending (the requests it has in flight then still finish:
    what the paced caller sees then is the recovery)."""
    loop = asyncio.get_running_loop()
    ends = loop.time() + warmup_s + duration_s
    crowd = asyncio.create_task(
        offer(
            target,
            images,
            duration_s=duration_s,
            concurrency=concurrency,
            rate=rate,
            warmup_s=warmup_s,
        )
    )
    await asyncio.sleep(warmup_s)
    samples = await paced_calls(target, images, ends + after_s - loop.time())
    return Spike(await crowd, samples, ends)
