"""Part 2: saturation images/s at each Triton replica count, on a simulated GPU slowed so that
these cores are never the limit, and the efficiency X(N) / (N·X(1))."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.benchlib import demo_client
from bench.pipeline.report import console
from bench.pipeline.stack import stack
from inferline_stack.config import TRITON
from inferline_stack.processes import ProcessTable
from inferline_stack.replicas import scale

SLOW_T0_MS, SLOW_K_MS, SLOW_MAX_BATCH = 400, 10, 8
SLOW_SIMULATED_GPU = (
    f"--simulated-t0-ms {SLOW_T0_MS} --simulated-k-ms {SLOW_K_MS} --max-batch-size {SLOW_MAX_BATCH}"
)


def slow_ceiling(replicas: int) -> float:
    """Images/s of ``replicas`` slowed simulated GPUs each running full batches back to back."""
    return replicas * SLOW_MAX_BATCH * 1000 / (SLOW_T0_MS + SLOW_K_MS * SLOW_MAX_BATCH)


def scale_out(replicas: tuple[int, ...], duration_s: float) -> dict[str, Any]:
    """Saturation images/s at each replica count, on the slowed simulated GPU."""
    points: dict[int, dict[str, Any]] = {}
    with stack("simulated_gpu", triton_args=SLOW_SIMULATED_GPU) as config:
        table = ProcessTable(Path(config.run_dir))
        for n in replicas:
            if scale(config, table, TRITON, n) != 0:
                raise SystemExit(f"could not scale Triton to {n} replicas")
            # Enough requests in flight to fill every replica's batches twice over.
            concurrency = 2 * 8 * n
            with console.status(f"scale-out: {n} replica(s), concurrency {concurrency} …"):
                summary = demo_client(f"127.0.0.1:{config.public_port}", 3, concurrency)
                summary = demo_client(f"127.0.0.1:{config.public_port}", duration_s, concurrency)
            points[n] = {
                "concurrency": concurrency,
                "images_per_s": round(summary["images_per_s"], 1),
                "of_ceiling": round(summary["images_per_s"] / slow_ceiling(n), 3),
                "p99_ms": round(summary["p99_ms"], 1),
                "errors": summary["errors"],
            }
            console.print(f"scale-out: N={n}: {points[n]['images_per_s']} images/s")
    single = points[replicas[0]]["images_per_s"] / replicas[0]
    for n, point in points.items():
        point["efficiency"] = round(point["images_per_s"] / (n * single), 3)
    return {
        "simulated_gpu": SLOW_SIMULATED_GPU,
        "points": {str(n): point for n, point in points.items()},
    }
