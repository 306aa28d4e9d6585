"""``python -m bench.gpu``: check the machine, run the chosen parts, print the summary and
write the result."""

from __future__ import annotations

import json
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console

from bench.benchlib import run_main
from bench.gpu.machine import no_gpu_reason, versions
from bench.gpu.model import model_part
from bench.gpu.params import MODEL, parse_args
from bench.gpu.pipeline import pipeline_part
from bench.gpu.report import console, summary
from bench.gpu_preprocess import dali_decode_rate, gpu_name
from bench.pipeline.stack import REPOSITORY
from inferline_models.repository import onnx_path
from preprocess.config import usable_cores

errors = Console(stderr=True)

# decode: the batch the preprocess service hands DALI at most, two pipelines in flight (its
# default), as bench.gpu_preprocess measures.
DECODE_BATCH, DECODE_PIPELINES = 64, 2


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reason = no_gpu_reason()
    if reason is not None:
        if args.skip_if_no_gpu:
            console.print(f"SKIPPED: no CUDA GPU visible to DALI ({reason})", soft_wrap=True)
            return 0
        errors.print(
            f"bench.gpu needs an NVIDIA GPU, and there is no CUDA GPU visible to DALI ({reason}). "
            "Run it on a GPU machine, or pass --skip-if-no-gpu to skip instead (CI).",
            soft_wrap=True,
        )
        return 2
    if {"model", "pipeline"} & set(args.parts) and not onnx_path(REPOSITORY, MODEL).exists():
        errors.print(f"no {MODEL} in {REPOSITORY}: run `make model` first", soft_wrap=True)
        return 2

    skipped: dict[str, str] = {}
    result: dict[str, Any] = {
        "benchmark": "gpu",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "gpu": gpu_name(),
        "cpu_cores": usable_cores(),
        "machine": platform.machine(),
        "versions": versions(),
        "duration_s": args.duration,
        "parts": list(args.parts),
        "skipped": skipped,
    }
    console.print(f"[bold]GPU[/]: {result['gpu']}; {result['cpu_cores']} CPU cores")
    if "decode" in args.parts:
        with console.status(f"decode: DALI mixed, batch {DECODE_BATCH}, {args.duration:g} s …"):
            result["decode"] = dali_decode_rate(DECODE_BATCH, DECODE_PIPELINES, args.duration)
        console.print(f"decode: {result['decode']['images_per_s']:.0f} images/s")
    if "model" in args.parts:
        result["model"] = model_part(args.duration, skipped)
    if "pipeline" in args.parts:
        result["pipeline"] = pipeline_part(args.duration, result.get("model"), skipped)

    summary(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
