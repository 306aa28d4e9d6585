"""Overload: the local stack at its capacity, then a crowd of ten times it, closed and open loop.

    python -m bench.overload [--model simulated|real] [--duration 60]

Phases, on a stack of its own (every hop through Envoy, the default decode placement):

1. unloaded: 2 callers, the latency to come back to (p99);
2. capacity: 64 closed-loop callers, images/s — the pipeline's capacity;
3. closed crowd: 1024 callers (5 s deadline each), then a light probe from the moment they stop;
4. open crowd: Poisson arrivals at ten times the capacity, then the probe again.

Each row: images/s that succeeded (goodput) and its ratio to the capacity, failures by status,
p99 of the successes, how fast refusals come (p99, for a paced probe caller arriving during the
crowd, and for the crowd's own), and each process's peak resident memory. Recovery: how long
after the crowd stopped sending every probe request was back within the unloaded p99 (plus 25%
and 20 ms). ``--model simulated`` (default) is a SIMULATED GPU slow enough that the
model, not these two cores, is the bottleneck: a batch of 8 takes 180 ms (44 images/s), so the
CPU left over shows what refusing costs. ``--model real`` is EfficientNet-Lite0 on the CPU.
Written to bench/results/overload.json and printed.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from bench.benchlib import jpegs, overload_stack, write_result
from inferline_testing.overload import measure


def print_table(result: dict[str, Any]) -> None:
    print(
        f"capacity {result['capacity_images_per_s']} images/s; unloaded p99 "
        f"{result['unloaded_p99_ms']} ms; every request's deadline {result['deadline_s']:g} s"
    )
    print(
        f"{'phase':<14}{'offered':<14}{'images/s':>9}{'ratio':>7}{'failed':>8}{'p99 ms':>8}"
        f"{'refused in p99 ms':>19}{'recovered s':>13}{'RSS MiB':>9}"
    )
    for row in result["phases"]:
        p99 = "-" if row["p99_ms"] is None else f"{row['p99_ms']:.0f}"
        refusal = f"{row.get('probe_refusal_p99_ms', '-')} / {row['refusal_p99_ms'] or '-'}"
        print(
            f"{row['phase']:<14}{row['offered']:<14}{row['images_per_s']:>9.1f}"
            f"{row.get('goodput_ratio', 1.0):>7.2f}{row['failed']:>8}{p99:>8}{refusal:>19}"
            f"{row.get('recovered_after_s', '-')!s:>13}{row['peak_rss_total_mib']:>9}"
        )
        print(f"{'':<14}failed {row['failed_by_code']}; peak RSS (MiB) {row['peak_rss_mib']}")
    print(
        "refused in: p99 of how fast a paced probe arriving during the crowd was refused / of "
        "the crowd's own refusals (its generator shares these cores); recovered: seconds after "
        f"the crowd stopped sending until every probe request was within "
        f"{result['recovery_bound_ms']} ms (None: not within the probe's 10 s)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("simulated", "real"), default="simulated")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per phase")
    args = parser.parse_args(argv)
    images = jpegs(8, 640, 480, (85, 90))
    with overload_stack(args.model, "overload") as config:
        report = asyncio.run(measure(config, images, args.duration))
    result = {"model": args.model, **report.to_dict()}
    print_table(result)
    print(f"written to {write_result('overload', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
