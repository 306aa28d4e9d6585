"""Soak: load at 70% of capacity for a long while, a scale event every minute, and nothing leaks.

    python -m bench.soak [--duration 600] [--model simulated|real]   (make soak DURATION=…)

On a stack of its own (every hop through Envoy): measures the capacity of one Triton replica,
then offers 70% of it as an open loop (Poisson arrivals, 5 s deadline each) for ``--duration``
seconds while Triton goes 1 → 2 → 1 → … replicas, one step a minute (``make scale`` in
process). Every few seconds it samples each process's resident memory and open file descriptors
(/proc). Reports the failed requests (goal: 0) and, per process, the slope of its RSS and file
descriptors over the run's last two thirds (the first third is warm-up: caches, allocator
arenas, connection pools) — goal: flat, that is under ``--rss-slope`` MiB and ``--fd-slope``
descriptors a minute (Prometheus, whose memory grows with what it stores, is reported but not
judged). Exits 1 when a goal is missed; CI runs a 5-minute version. Written to
bench/results/soak.json and printed.

``--model simulated`` (default) is a SIMULATED GPU (the overload benchmark's: the model, not the
cores, is the bottleneck); ``--model real`` is EfficientNet-Lite0 on the CPU.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.benchlib import jpegs, overload_stack, run_main, write_result
from demo_client.load import Outcome
from inferline_stack.config import TRITON, StackConfig
from inferline_stack.processes import ProcessTable
from inferline_stack.replicas import scale
from inferline_testing.overload.crowds import offer
from inferline_testing.overload.scenario import CAPACITY_CALLERS, DEADLINE_S
from inferline_testing.overload.usage import stack_groups
from inferline_testing.procfs import group_usage

MiB = 1024 * 1024
LOAD_SHARE = 0.7
SCALE_EVERY_S = 60.0
SAMPLE_EVERY_S = 5.0
# Reported, not judged: Prometheus keeps every sample it scrapes in memory until its head block
# is compacted (every two hours), so its memory grows by design.
NOT_JUDGED = ("prometheus",)


@dataclass
class Track:
    """One process's samples: (seconds since start, RSS bytes, open fds)."""

    samples: list[tuple[float, int, int]] = field(default_factory=list)

    def slopes_per_min(self, skip: float) -> tuple[float, float] | None:
        """Least-squares slope of RSS (MiB/min) and fds (/min) after the first ``skip`` of the
        samples; None with fewer than 3 samples left."""
        points = self.samples[int(len(self.samples) * skip) :]
        if len(points) < 3:
            return None
        return (
            slope([(t, r / MiB) for t, r, _ in points]) * 60,
            slope([(t, float(f)) for t, _, f in points]) * 60,
        )


def slope(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / var


async def scale_events(config: StackConfig, duration_s: float, log: list[str]) -> None:
    """Triton 1 → 2 → 1 … replicas, one step every minute, until ``duration_s`` has passed."""
    table = ProcessTable(Path(config.run_dir))
    loop = asyncio.get_running_loop()
    start = loop.time()
    replicas = 1
    step = 1
    while (due := start + step * SCALE_EVERY_S) < start + duration_s:
        await asyncio.sleep(due - loop.time())
        replicas = 2 if replicas == 1 else 1
        status = await asyncio.to_thread(scale, config, table, TRITON, replicas)
        log.append(f"{loop.time() - start:.0f}s: triton -> {replicas} replicas (exit {status})")
        step += 1


async def sample(config: StackConfig, duration_s: float, tracks: dict[str, Track]) -> None:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while (now := loop.time()) - start < duration_s:
        for name, pgid in stack_groups(config).items():
            usage = await asyncio.to_thread(group_usage, pgid)
            if usage.rss_bytes:  # one track per process: a replica started again is another
                tracks.setdefault(f"{name}[{pgid}]", Track()).samples.append(
                    (now - start, usage.rss_bytes, usage.fds)
                )
        await asyncio.sleep(SAMPLE_EVERY_S)


async def soak(config: StackConfig, images: list[bytes], duration_s: float) -> dict[str, Any]:
    target = f"127.0.0.1:{config.public_port}"
    capacity = await offer(target, images, duration_s=15.0, concurrency=CAPACITY_CALLERS)
    rate = capacity.images_per_s * LOAD_SHARE
    tracks: dict[str, Track] = {}
    events: list[str] = []
    failures: list[Outcome] = []  # when each failed request was sent, and what it was told
    started = asyncio.get_running_loop().time()

    def failed(outcome: Outcome) -> None:
        if outcome.error is not None:
            failures.append(outcome)

    load = offer(
        target, images, duration_s=duration_s, concurrency=1024, rate=rate, timeout_s=DEADLINE_S,
        on_outcome=failed,
    )  # fmt: skip
    summary, _, _ = await asyncio.gather(
        load, scale_events(config, duration_s, events), sample(config, duration_s, tracks)
    )
    processes = {}
    for name, track in sorted(tracks.items()):
        if track.samples[-1][0] - track.samples[0][0] < 0.8 * duration_s:
            continue  # a replica the scale events started and stopped: it did not live long
        slopes = track.slopes_per_min(skip=1 / 3)
        first, last = track.samples[0], track.samples[-1]
        processes[name] = {
            "samples": len(track.samples),
            "rss_mib": [round(first[1] / MiB), round(last[1] / MiB)],
            "fds": [first[2], last[2]],
            "rss_mib_per_min": None if slopes is None else round(slopes[0], 2),
            "fds_per_min": None if slopes is None else round(slopes[1], 2),
            # What a slope cannot show: a step (an allocator's high-water mark) or a ramp.
            "rss_mib_series": [[round(t), round(r / MiB, 1)] for t, r, _ in track.samples],
        }
    return {
        "capacity_images_per_s": round(capacity.images_per_s, 1),
        "offered_per_s": round(rate, 1),
        "duration_s": duration_s,
        "requests": summary.requests,
        "failed": summary.errors,
        "failed_by_code": summary.errors_by_code,
        # The first of each status, what it said, and when each failed one was sent (s from the
        # load's start): set beside the scale events, whether they failed around one of them.
        "failed_messages": {o.error: o.message for o in reversed(failures)},
        "failed_sent_s": [round(o.sent - started, 1) for o in failures],
        "images_per_s": round(summary.images_per_s, 1),
        "p99_ms": None if summary.p99_ms is None else round(summary.p99_ms, 1),
        "scale_events": events,
        "processes": processes,
    }


def verdict(result: dict[str, Any], rss_slope: float, fd_slope: float) -> list[str]:
    """The goals missed, in words (empty: all met)."""
    missed = []
    if result["failed"]:
        missed.append(f"{result['failed']} requests failed: {result['failed_by_code']}")
    for name, process in result["processes"].items():
        if name.startswith(NOT_JUDGED):
            continue
        rss, fds = process["rss_mib_per_min"], process["fds_per_min"]
        if rss is not None and rss > rss_slope:
            missed.append(f"{name}: RSS grows {rss:.2f} MiB/min (goal < {rss_slope})")
        if fds is not None and fds > fd_slope:
            missed.append(f"{name}: open fds grow {fds:.2f}/min (goal < {fd_slope})")
    return missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    parser.add_argument("--model", choices=("simulated", "real"), default="simulated")
    parser.add_argument("--rss-slope", type=float, default=4.0, help="MiB/min counted as flat")
    parser.add_argument("--fd-slope", type=float, default=2.0, help="fds/min counted as flat")
    args = parser.parse_args(argv)
    images = jpegs(8, 640, 480, (85, 90))
    with overload_stack(args.model, "soak") as config:
        result = asyncio.run(soak(config, images, args.duration))
    result = {"model": args.model, **result}
    print(
        f"{result['duration_s']:.0f} s at {result['offered_per_s']}/s (70% of "
        f"{result['capacity_images_per_s']}/s): {result['requests']} requests, "
        f"{result['failed']} failed {result['failed_by_code']}, p99 {result['p99_ms']} ms"
    )
    for event in result["scale_events"]:
        print(f"  {event}")
    for code, message in result["failed_messages"].items():
        print(f"  {code}, the first said: {message}")
    if result["failed_sent_s"]:
        print(f"  the failed requests were sent at (s): {result['failed_sent_s']}")
    print(f"{'process':<22}{'RSS MiB':>12}{'MiB/min':>9}{'fds':>12}{'/min':>7}  (first→last)")
    for name, p in result["processes"].items():
        rss = f"{p['rss_mib'][0]}→{p['rss_mib'][1]}"
        fds = f"{p['fds'][0]}→{p['fds'][1]}"
        print(f"{name:<22}{rss:>12}{p['rss_mib_per_min']!s:>9}{fds:>12}{p['fds_per_min']!s:>7}")
    missed = verdict(result, args.rss_slope, args.fd_slope)
    result["missed"] = missed
    print(f"written to {write_result('soak', result)}")
    for line in missed:
        print(f"MISSED: {line}")
    print("goals met: no failed request, RSS and fds flat" if not missed else "")
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(run_main(main))
