"""``python -m bench.pipeline``: each chosen scenario on a stack of its own, then the scale-out;
the tables, and the result file."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import bench.pipeline
from bench.benchlib import run_main, write_result
from bench.pipeline.measure import decoder_floor_ms, measure
from bench.pipeline.report import console, print_per_core, print_table
from bench.pipeline.scale_out import scale_out
from bench.pipeline.scenarios import SCENARIOS, Scenario
from bench.pipeline.stack import stack, timed, traced
from demo_client.samples import build_samples


def scenarios(chosen: tuple[Scenario, ...], duration_s: float, **overrides: Any) -> dict[str, Any]:
    photos = [p.read_bytes() for p in build_samples()]  # the demo client's own photos
    results: dict[str, Any] = {}
    for scenario in chosen:
        floor_ms = decoder_floor_ms(photos)  # beside each run: this machine's speed drifts
        status = f"{scenario.title}: starting the stack, then {duration_s:g} s …"
        settings = {"placement": scenario.placement, "proxyless": scenario.proxyless}
        with (
            console.status(status),
            traced(scenario.sampled),
            timed(scenario.timed),
            stack(scenario.model, **settings, **overrides) as config,
        ):
            result = measure(
                config,
                concurrency=scenario.concurrency,
                batch=scenario.batch,
                duration_s=duration_s,
                floor_ms=floor_ms,
                protocol=scenario.protocol,
            )
        results[scenario.key] = {**asdict(scenario), **result}
        console.print(
            f"{scenario.title}: {result['total_cpu_ms_per_image']} CPU ms/image, overhead "
            f"{result['pipeline_overhead_ms_per_image']} ms, {result['images_per_s']} images/s, "
            f"{result['envoy_kib_per_image']} KiB/image through Envoy"
        )
    return results


def parse_compare(item: str, parser: argparse.ArgumentParser) -> tuple[str, float]:
    name, _, figure = item.rpartition("=")
    try:
        value = float(figure)
    except ValueError:
        value = -1.0
    if not name or value <= 0:
        parser.error(f"--compare {item!r}: NAME=IMAGES_PER_S_PER_CORE, a positive figure")
    return name, value


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.pipeline", description=bench.pipeline.__doc__
    )
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per measurement")
    parser.add_argument(
        "--scenarios",
        default=",".join(s.key for s in SCENARIOS),
        help="which, comma-separated (default: %(default)s)",
    )
    parser.add_argument("--skip-scale-out", action="store_true")
    parser.add_argument(
        "--out",
        type=Path,
        help="write the results here instead of bench/results/pipeline.json (a partial run "
        "beside the committed one)",
    )
    parser.add_argument(
        "--envoy-workers", type=int, default=0, help="Envoy's worker threads (0: the stack's)"
    )
    parser.add_argument(
        "--compare",
        action="append",
        default=[],
        metavar="NAME=IMAGES_PER_S_PER_CORE",
        help="another server's figure to print beside the default's, e.g. 'Ray Serve=120' "
        "(measured on the same machine and model); repeatable",
    )
    args = parser.parse_args()
    compared = dict(parse_compare(item, parser) for item in args.compare)

    keys = {key.strip() for key in args.scenarios.split(",") if key.strip()}
    known = [s.key for s in SCENARIOS]
    if unknown := keys - set(known):
        parser.error(f"unknown scenarios {sorted(unknown)}; choose from {known}")
    chosen = tuple(s for s in SCENARIOS if s.key in keys)
    results = scenarios(chosen, args.duration, envoy_workers=args.envoy_workers)
    print_table(results)
    print_per_core(results, compared)
    photos = [p.stat().st_size for p in build_samples()]
    out: dict[str, Any] = {
        "scenarios": results,
        "compared_images_per_s_per_core": compared,
        "photo_kib": round(sum(photos) / len(photos) / 1024, 1),  # the demo client's, mean
        "duration_s": args.duration,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }
    if not args.skip_scale_out:
        out["scale_out"] = scale_out((1, 2, 4), args.duration)
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
        console.print(f"wrote {args.out}")
    else:
        console.print(f"wrote {write_result('pipeline', out)}")


if __name__ == "__main__":
    sys.exit(run_main(main))
