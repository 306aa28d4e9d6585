"""The benchmark's parameters, from the command line."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

import bench.batcher

PARTS = ("throughput", "scale-out", "latency", "balance")


@dataclass(frozen=True)
class Params:
    t0_ms: float = 8.0
    k_ms: float = 0.1
    max_batch: int = 64
    max_queue_delay_ms: float = 3.0
    time_scale: float = 50.0  # part 2 only
    replicas: tuple[int, ...] = (1, 2, 4)
    loads: tuple[float, ...] = (0.125, 0.5, 0.9)
    concurrencies: tuple[int, ...] = (1, 8, 64)
    # Per scale-out point and arrangement, within these bounds: the 18 runs in minutes.
    point_requests: int = 700
    point_min_s: float = 8.0
    point_max_s: float = 25.0
    warmup_s: float = 3.0
    throughput_s: float = 8.0
    latency_requests: int = 400
    tolerance: float = 0.10

    def batch_s(self, scale: float, items: int) -> float:
        return scale * (self.t0_ms + self.k_ms * items) / 1000.0

    def capacity(self, scale: float) -> float:
        """Images/s one replica serves with full batches."""
        return self.max_batch / self.batch_s(scale, self.max_batch)

    def point_s(self, rate: float) -> float:
        """Seconds to measure at ``rate``: ``point_requests`` of them, within the bounds."""
        return min(max(self.point_requests / rate, self.point_min_s), self.point_max_s)


def _numbers(text: str) -> tuple[float, ...]:
    return tuple(float(n) for n in text.split(","))


def parse_args(argv: Sequence[str] | None) -> tuple[Params, set[str], bool]:
    """The parameters, the parts to run and whether to keep the processes' logs."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.batcher",
        description=bench.batcher.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = Params()
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help="comma-separated: throughput, scale-out, latency (default: all three)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=defaults.time_scale,
        help="slow part 2's clock by this factor (default %(default)s)",
    )
    parser.add_argument("--t0-ms", type=float, default=defaults.t0_ms)
    parser.add_argument("--k-ms", type=float, default=defaults.k_ms)
    parser.add_argument("--max-batch", type=int, default=defaults.max_batch)
    parser.add_argument("--max-queue-delay-ms", type=float, default=defaults.max_queue_delay_ms)
    parser.add_argument("--replicas", default="1,2,4")
    parser.add_argument("--loads", default="0.125,0.5,0.9")
    parser.add_argument("--concurrencies", default="1,8,64", help="part 1's closed loops")
    parser.add_argument(
        "--point-requests",
        type=int,
        default=defaults.point_requests,
        help="requests measured per scale-out point and arrangement (within the bounds below)",
    )
    parser.add_argument("--point-min-s", type=float, default=defaults.point_min_s)
    parser.add_argument("--point-max-s", type=float, default=defaults.point_max_s)
    parser.add_argument("--warmup-s", type=float, default=defaults.warmup_s)
    parser.add_argument("--throughput-s", type=float, default=defaults.throughput_s)
    parser.add_argument("--latency-requests", type=int, default=defaults.latency_requests)
    parser.add_argument(
        "--tolerance",
        type=float,
        default=defaults.tolerance,
        help="run-to-run spread allowed when comparing arrangements",
    )
    parser.add_argument("--quick", action="store_true", help="short runs: proves it works")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs")
    args = parser.parse_args(argv)
    params = Params(
        t0_ms=args.t0_ms,
        k_ms=args.k_ms,
        max_batch=args.max_batch,
        max_queue_delay_ms=args.max_queue_delay_ms,
        time_scale=args.time_scale,
        replicas=tuple(int(n) for n in _numbers(args.replicas)),
        loads=_numbers(args.loads),
        concurrencies=tuple(int(n) for n in _numbers(args.concurrencies)),
        point_requests=250 if args.quick else args.point_requests,
        point_min_s=4.0 if args.quick else args.point_min_s,
        point_max_s=10.0 if args.quick else args.point_max_s,
        warmup_s=1.5 if args.quick else args.warmup_s,
        throughput_s=3.0 if args.quick else args.throughput_s,
        latency_requests=150 if args.quick else args.latency_requests,
        tolerance=args.tolerance,
    )
    parts = set(args.parts.split(","))
    unknown = parts - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}")
    return params, parts, args.keep_logs
