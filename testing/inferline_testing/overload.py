"""Overload, measured: the pipeline's capacity, a crowd of ten times it (closed and open
loop), how fast refusals come, each process's memory meanwhile, and how soon latency recovers
once the crowd leaves, and how requests with a deadline shorter than the fastest answer are
refused. Shared by the overload test (tests/e2e/test_overload.py), which asserts what is
refused and how, and ``make bench-overload``, which reports these figures against the goals
(how fast, how much), so both come from one code.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc.aio as triton
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from demo_client.client import open_clients
from demo_client.load import LoadConfig, run_load
from demo_client.stats import Recorder, Summary, percentiles_ms
from inferline_stack.config import StackConfig
from inferline_stack.processes import ProcessTable
from inferline_testing.procfs import group_usage
from inferline_testing.waits import wait_for_state

MiB = 1024 * 1024


@dataclass(frozen=True)
class Phase:
    """One row of the overload table."""

    name: str
    offered: str  # what was offered: "closed 32" or "open 440/s"
    summary: Summary
    peak_rss: dict[str, int] = field(default_factory=dict)  # process -> bytes, during the phase
    # The share of the machine's cores the load generator (this process) used meanwhile: on a
    # machine it shares with the pipeline, what it costs is taken from the pipeline.
    generator_cpu: float | None = None

    @property
    def goodput(self) -> float:
        return self.summary.images_per_s

    def row(self) -> dict[str, object]:
        s = self.summary
        return {
            "phase": self.name,
            "offered": self.offered,
            "images_per_s": round(s.images_per_s, 1),
            "requests": s.requests,
            "failed": s.errors,
            "failed_by_code": s.errors_by_code,
            "p99_ms": None if s.p99_ms is None else round(s.p99_ms, 1),
            "refusal_p99_ms": None if s.failed_p99_ms is None else round(s.failed_p99_ms, 1),
            "peak_rss_mib": {k: round(v / MiB) for k, v in sorted(self.peak_rss.items())},
            "peak_rss_total_mib": round(sum(self.peak_rss.values()) / MiB),
            "generator_cpu": None if self.generator_cpu is None else round(self.generator_cpu, 2),
        }


@contextlib.contextmanager
def own_cpu() -> Iterator[list[float]]:
    """The share of this machine's cores this process used while the block ran (filled in on
    leaving, as the list's one item)."""
    share: list[float] = []
    start, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    try:
        yield share
    finally:
        end = resource.getrusage(resource.RUSAGE_SELF)
        used = end.ru_utime - start.ru_utime + end.ru_stime - start.ru_stime
        cores = len(os.sched_getaffinity(0))
        share.append(used / max(time.monotonic() - wall, 1e-9) / cores)


def stack_groups(config: StackConfig) -> dict[str, int]:
    """{process name: its process group} of the stack's running processes."""
    table = ProcessTable(Path(config.run_dir))
    return {name: pid for name in table.names() if (pid := table.pid(name)) is not None}


@contextlib.asynccontextmanager
async def peak_rss(
    groups: Mapping[str, int], every_s: float = 0.25
) -> AsyncIterator[dict[str, int]]:
    """The most resident memory each process group reached while the block ran (sampled)."""
    peaks = {name: 0 for name in groups}

    def sample() -> None:
        for name, pgid in groups.items():
            peaks[name] = max(peaks[name], group_usage(pgid).rss_bytes)

    async def sampler() -> None:
        while True:
            await asyncio.to_thread(sample)
            await asyncio.sleep(every_s)

    task = asyncio.create_task(sampler())
    try:
        yield peaks
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sample()


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
) -> Summary:
    """The demo client's load: ``concurrency`` closed-loop callers, or (``rate``) an open loop
    with up to ``concurrency`` in flight; every request with a ``timeout_s`` deadline. The first
    ``warmup_s`` seconds are sent but not recorded."""
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
        return await run_load(clients, config, list(images), recorder)


@dataclass(frozen=True)
class Sample:
    sent: float  # loop time
    latency_s: float
    error: str | None


async def probe(
    target: str,
    images: Sequence[bytes],
    duration_s: float,
    pace_s: float = 0.02,
    timeout_s: float = 5.0,
) -> list[Sample]:
    """One caller, one request at a time, at most one every ``pace_s`` (a refused caller that
    came straight back would be a load of its own), keeping each request's send time and
    latency; in a process of its own (:mod:`inferline_testing.paced_probe`), so that a crowd
    generated in this one does not slow what it sees. One caller: two would fall in and out of
    step with each other's batches."""
    with tempfile.TemporaryDirectory(prefix="inferline-probe-") as tmp:
        paths = []
        for i, image in enumerate(images):
            paths.append(Path(tmp) / f"{i}.jpg")
            paths[-1].write_bytes(image)
        argv = ["--target", target, "--duration", str(duration_s), "--pace", str(pace_s)]
        argv += ["--timeout", str(timeout_s), *map(str, paths)]
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "inferline_testing.paced_probe", *argv,
            stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, _ = await process.communicate()
    if process.returncode:
        raise RuntimeError(f"the probe failed (exit {process.returncode})")
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
    probe: list[Sample]  # one paced caller, from the end of the crowd's warm-up on
    ended: float  # loop time the crowd stopped sending

    @property
    def during(self) -> list[Sample]:
        return [s for s in self.probe if s.sent < self.ended]

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
    after_s: float = 10.0,
) -> Spike:
    """Offer a crowd (:func:`offer`), with a paced probe from the end of its warm-up until
    ``after_s`` after it stopped sending (the requests it has in flight then still finish:
    what the probe sees then is the recovery)."""
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
    samples = await probe(target, images, ends + after_s - loop.time())
    return Spike(await crowd, samples, ends)


# The SIMULATED GPU of the overload runs: slow enough that the model, not the two cores of the
# machine the tests run on, is the bottleneck: a batch of 8 takes 180 ms (44 images/s).
SIMULATED = {
    "model": "simulated_gpu",
    "triton_args": "--simulated-t0-ms 100 --simulated-k-ms 10 --max-batch-size 8",
}
CAPACITY_CALLERS = 64
CROWD_CALLERS = 1024
CROWD_FACTOR = 10.0
# Not measured: the crowd's first seconds, while the burst of all its callers starting in the
# same millisecond is refused (a thousand requests queued at once take a few hundred ms).
CROWD_WARMUP_S = 5.0
DEADLINE_S = 5.0


def recovery_bound_s(unloaded_p99_ms: float) -> float:
    """Recovered: every request within the unloaded p99, plus 25% and 20 ms of noise."""
    return (unloaded_p99_ms * 1.25 + 20.0) / 1000.0


@dataclass(frozen=True)
class Report:
    unloaded_p99_ms: float
    capacity: Phase
    crowds: list[tuple[Phase, Spike]]

    @property
    def recovery_bound_s(self) -> float:
        return recovery_bound_s(self.unloaded_p99_ms)

    def goodput_ratio(self, crowd: Phase) -> float:
        return crowd.goodput / self.capacity.goodput

    def recovered_after_s(self, spike: Spike) -> float | None:
        return recovered_after(spike.probe, spike.ended, self.recovery_bound_s)

    def to_dict(self) -> dict[str, Any]:
        rows = [self.capacity.row()]
        for phase, spike in self.crowds:
            refusal = spike.refusal_p99_ms()
            recovered = self.recovered_after_s(spike)
            rows.append(
                {
                    **phase.row(),
                    "goodput_ratio": round(self.goodput_ratio(phase), 3),
                    "probe_refusal_p99_ms": None if refusal is None else round(refusal, 1),
                    "recovered_after_s": None if recovered is None else round(recovered, 2),
                }
            )
        return {
            "deadline_s": DEADLINE_S,
            "unloaded_p99_ms": round(self.unloaded_p99_ms, 1),
            "recovery_bound_ms": round(self.recovery_bound_s * 1000, 1),
            "capacity_images_per_s": round(self.capacity.goodput, 1),
            "phases": rows,
        }


async def measure(config: StackConfig, images: list[bytes], duration_s: float) -> Report:
    """Capacity, then the closed crowd and the open crowd, each ``duration_s`` long, each with
    the probe during it and for the recovery after it."""
    target = f"127.0.0.1:{config.public_port}"
    groups = stack_groups(config)
    await offer(target, images, duration_s=3.0, concurrency=CAPACITY_CALLERS)  # warm up
    unloaded = p99_ms(await probe(target, images, 5.0)) or 0.0
    with own_cpu() as cpu:
        async with peak_rss(groups) as peaks:
            summary = await offer(
                target, images, duration_s=duration_s, concurrency=CAPACITY_CALLERS
            )
    capacity = Phase("capacity", f"closed {CAPACITY_CALLERS}", summary, dict(peaks), *cpu)
    if not summary.images:
        raise RuntimeError(f"the capacity run served nothing: failed {summary.errors_by_code}")
    rate = capacity.goodput * CROWD_FACTOR
    crowds = []
    for name, concurrency, crowd_rate, offered in (
        ("closed crowd", CROWD_CALLERS, None, f"closed {CROWD_CALLERS}"),
        ("open crowd", 4 * CROWD_CALLERS, rate, f"open {rate:.0f}/s"),
    ):
        with own_cpu() as cpu:
            async with peak_rss(groups) as peaks:
                result = await spike(
                    target,
                    images,
                    duration_s=duration_s,
                    concurrency=concurrency,
                    rate=crowd_rate,
                    warmup_s=CROWD_WARMUP_S,
                )
        crowds.append((Phase(name, offered, result.summary, dict(peaks), *cpu), result))
    return Report(unloaded, capacity, crowds)


def triton_inferences(config: StackConfig) -> float:
    """Items Triton inferred so far (``nv_inference_count``), from its own metrics."""
    url = f"http://127.0.0.1:{config.replica_ports('triton', 0)[2]}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "nv_inference_count"
        for sample in family.samples
    )


@dataclass(frozen=True)
class Outcome:
    elapsed_s: float
    status: str  # "StatusCode.DEADLINE_EXCEEDED", …; "" when answered
    message: str


SHORT_DEADLINE_S = 0.05
# The background load meanwhile: busy, but under middleman's admission floor (32 in flight), so
# nothing is refused for load and nothing shed at the front door: each 50 ms request meets
# middleman's deadline check, not the crowd's.
SHORT_CALLERS = 24


@dataclass(frozen=True)
class ShortDeadlines:
    """Requests with a deadline shorter than the pipeline's fastest answer, sent one at a time
    under load; the background load's summary, and the items Triton inferred meanwhile."""

    outcomes: list[Outcome]
    background: Summary
    inferred: float

    def refused(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status.endswith("DEADLINE_EXCEEDED")]

    def to_dict(self) -> dict[str, Any]:
        refused = self.refused()
        slowest = max((o.elapsed_s for o in refused), default=None)
        return {
            "deadline_ms": SHORT_DEADLINE_S * 1000,
            "background_callers": SHORT_CALLERS,
            "requests": len(self.outcomes),
            "by_status": dict(Counter(o.status or "OK" for o in self.outcomes)),
            "refused": len(refused),
            "slowest_refusal_ms": None if slowest is None else round(slowest * 1000, 1),
        }


async def short_deadlines(
    config: StackConfig, images: Sequence[bytes], count: int = 20
) -> ShortDeadlines:
    """``count`` requests of ``images[0]`` with a :data:`SHORT_DEADLINE_S` deadline, once the
    background load (:data:`SHORT_CALLERS` callers) has had Triton answer a few batches."""
    target = f"127.0.0.1:{config.public_port}"
    before = triton_inferences(config)
    background = asyncio.create_task(
        offer(target, images, duration_s=8.0, concurrency=SHORT_CALLERS, channels=2)
    )
    tensor = triton.InferInput("IMAGE", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([images[0]], dtype=np.object_))
    outcomes = []
    async with open_clients(target) as (client,):
        await wait_for_state(
            lambda: triton_inferences(config) - before >= 96,
            60.0,
            "96 images of the background load inferred",
            abort=lambda: ended(background),
        )
        for _ in range(count):
            start = time.perf_counter()
            try:
                await client.infer("classifier", [tensor], client_timeout=SHORT_DEADLINE_S)
                status, message = "", ""
            except InferenceServerException as error:
                status, message = str(error.status()), str(error.message())
            outcomes.append(Outcome(time.perf_counter() - start, status, message))
    summary = await background
    return ShortDeadlines(outcomes, summary, triton_inferences(config) - before)


def ended(load: asyncio.Task[Summary]) -> str | None:
    """Why waiting on ``load`` is pointless: it has ended (saying how), or None."""
    if not load.done():
        return None
    if load.cancelled():
        return "the load was cancelled"
    if (error := load.exception()) is not None:
        return f"the load failed: {error!r}"
    summary = load.result()
    return f"the load ended: {summary.images} images served, failed {summary.errors_by_code}"


def table(result: dict[str, Any]) -> str:
    """A :meth:`Report.to_dict` as the table ``make bench-overload`` prints."""
    lines = [
        f"capacity {result['capacity_images_per_s']} images/s; unloaded p99 "
        f"{result['unloaded_p99_ms']} ms; every request's deadline {result['deadline_s']:g} s",
        f"{'phase':<14}{'offered':<14}{'images/s':>9}{'ratio':>7}{'failed':>8}{'p99 ms':>8}"
        f"{'refused in p99 ms':>19}{'recovered s':>13}{'RSS MiB':>9}",
    ]
    for row in result["phases"]:
        p99 = "-" if row["p99_ms"] is None else f"{row['p99_ms']:.0f}"
        refusal = f"{row.get('probe_refusal_p99_ms', '-')} / {row['refusal_p99_ms'] or '-'}"
        lines.append(
            f"{row['phase']:<14}{row['offered']:<14}{row['images_per_s']:>9.1f}"
            f"{row.get('goodput_ratio', 1.0):>7.2f}{row['failed']:>8}{p99:>8}{refusal:>19}"
            f"{row.get('recovered_after_s', '-')!s:>13}{row['peak_rss_total_mib']:>9}"
        )
        lines.append(
            f"{'':<14}failed {row['failed_by_code']}; peak RSS (MiB) {row['peak_rss_mib']}; "
            f"the load generator used {row.get('generator_cpu')} of the machine's cores"
        )
    lines.append(
        "refused in: p99 of how fast a paced probe arriving during the crowd was refused / of "
        "the crowd's own refusals (its generator shares these cores); recovered: seconds after "
        "the crowd stopped sending until every probe request was within "
        f"{result['recovery_bound_ms']} ms (None: not within the probe's 10 s)"
    )
    if short := result.get("short_deadline"):
        lines.append(short_deadline_line(short))
    return "\n".join(lines)


def short_deadline_line(short: dict[str, Any]) -> str:
    """A :meth:`ShortDeadlines.to_dict` in a line."""
    return (
        f"{short['deadline_ms']:g} ms requests under {short['background_callers']} callers: "
        f"{short['refused']} of {short['requests']} refused DEADLINE_EXCEEDED, the slowest in "
        f"{short['slowest_refusal_ms']} ms; by status {short['by_status']}"
    )
