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

from bench.benchlib import jpegs, overload_stack, write_result
from inferline_testing.overload import measure, table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=("simulated", "real"), default="simulated")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per phase")
    args = parser.parse_args(argv)
    images = jpegs(8, 640, 480, (85, 90))
    with overload_stack(args.model, "overload") as config:
        report = asyncio.run(measure(config, images, args.duration))
    result = {"model": args.model, **report.to_dict()}
    print(table(result))
    print(f"written to {write_result('overload', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
