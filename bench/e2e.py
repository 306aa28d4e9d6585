"""Model-only ceiling vs the whole pipeline, side by side in one run.

1. ONNX Runtime in this process on the exported model, batches of ``concurrency`` images
   (what Triton's dynamic batcher can at best form at that concurrency): the ceiling here.
2. The demo client through middleman + Triton (every hop through Envoy, as deployed; no
   batcher) at the same concurrency, for the same images, decoding in middleman's process
   ("pipeline") and then at the preprocess service over gRPC.

Writes bench/results/e2e.json with model_only_images_per_s, pipeline_images_per_s and ratio.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.benchlib import ROOT, demo_client, local_stack, run_main, write_result
from demo_client.samples import build_samples
from inferline.imaging.decode import Geometry, Limits, decode_image
from inferline_models.onnx_backend import OnnxRunner, default_threads
from inferline_models.repository import MODEL_NAME, load_spec, onnx_path
from inferline_testing.direct import direct_pipeline

console = Console()


def model_only(repository: Path, images: list[bytes], batch: int, duration: float) -> float:
    """Images/s of ONNX Runtime alone on pre-decoded batches of ``batch`` images."""
    runner = OnnxRunner(
        onnx_path(repository, MODEL_NAME), load_spec(repository, MODEL_NAME), default_threads()
    )
    tensors = [decode_image(data, Geometry(), Limits()) for data in images]
    stacked = np.stack([tensors[i % len(tensors)] for i in range(batch)])
    runner.infer(INPUT=stacked)  # warm-up
    done, start = 0, time.perf_counter()
    while time.perf_counter() - start < duration:
        runner.infer(INPUT=stacked)
        done += batch
    return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per measurement")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--repository", type=Path, default=ROOT / "build" / "model_repository")
    args = parser.parse_args()

    samples = build_samples(ROOT / ".run" / "samples")
    images = [path.read_bytes() for path in samples]

    def ceiling() -> float:
        with console.status(f"model only: ONNX Runtime, batch {args.concurrency} …"):
            rate = model_only(args.repository, images, args.concurrency, args.duration)
        console.print(f"model only: {rate:.1f} images/s")
        return rate

    # The ceiling is measured before and after the pipelines and the higher one is used: this
    # machine's speed drifts between runs, and a low ceiling would flatter the ratio.
    ceilings = [ceiling()]
    run_dir = Path(tempfile.mkdtemp(prefix="inferline-bench-"))
    with direct_pipeline(run_dir, args.repository, MODEL_NAME) as url:
        demo_client(url, 3, args.concurrency)  # warm-up: connections, thread pools
        pipeline = demo_client(url, args.duration, args.concurrency)
    # The deployed shape for comparison: Envoy in front of every hop, each placement (the
    # default, in-pod, with the batcher it needs; the others without: bench.batcher measures it).
    stacks = {}
    for placement in ("in-pod", "in-process", "remote"):
        run_dir = Path(tempfile.mkdtemp(prefix="inferline-bench-"))
        overrides = {
            "model_repository": str(args.repository),
            "placement": placement,
            "batcher": placement == "in-pod",
        }
        with local_stack(run_dir, **overrides) as stack:
            target = f"127.0.0.1:{stack.public_port}"
            demo_client(target, 3, args.concurrency)
            stacks[placement] = demo_client(target, args.duration, args.concurrency)

    ceilings.append(ceiling())
    best = max(ceilings)
    result = {
        "model_only_images_per_s": round(best, 1),
        "model_only_runs_images_per_s": [round(c, 1) for c in ceilings],
        "pipeline_images_per_s": round(pipeline["images_per_s"], 1),
        "ratio": round(pipeline["images_per_s"] / best, 3),
        "pipeline_p50_ms": round(pipeline["p50_ms"], 1),
        "pipeline_p99_ms": round(pipeline["p99_ms"], 1),
        "pipeline_errors": pipeline["errors"],
        **{
            f"envoy_{placement}_{key}": round(summary[key], 1)
            for placement, summary in stacks.items()
            for key in ("images_per_s", "p50_ms", "p99_ms", "errors")
        },
        "concurrency": args.concurrency,
        "duration_s": args.duration,
        "images": len(images),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }
    table = Table(title="inferline e2e: model-only ceiling vs pipeline")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for key, value in result.items():
        table.add_row(key, str(value))
    console.print(table)
    console.print(f"wrote {write_result('e2e', result)}")


if __name__ == "__main__":
    sys.exit(run_main(main))
