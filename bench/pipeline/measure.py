"""CPU per image of each process of the stack over one demo-client run, the decoder's own CPU per
image beside it, and the bytes through Envoy."""

from __future__ import annotations

import asyncio
import resource
import time
from pathlib import Path
from typing import Any

import cv2

from bench.benchlib import demo_client
from inferline.imaging.decode import Geometry, Limits, decode_image
from inferline_envoy import admin as envoy_admin
from inferline_stack.config import PREPROCESS, StackConfig
from inferline_testing.overload.usage import stack_groups
from inferline_testing.procfs import group_pids, process_usage

CLIENT = "demo client"
# The processes of the inference path, as the table shows them, in the order of a request.
PROCESSES = ("triton", "preprocess", "middleman", "envoy", "batcher", "eds", CLIENT)


def process_of(name: str) -> str | None:
    """The table's row for a process of the stack (``triton-1`` -> ``triton``)."""
    base = name.rsplit("-", 1)[0] if name[-1:].isdigit() else name
    return base if base in PROCESSES else None  # prometheus is not on the inference path


def cpu_seconds(config: StackConfig) -> dict[str, float]:
    """CPU seconds each row's processes have used so far (replicas summed; in a GPU pod, its
    preprocess is a preprocess and the rest is Triton)."""
    used = dict.fromkeys(PROCESSES, 0.0)
    for name, pgid in stack_groups(config).items():
        row = process_of(name)
        if row is None:
            continue
        for pid in group_pids(pgid):
            used[PREPROCESS if is_preprocess(pid) else row] += process_usage(pid).cpu_s
    return used


def is_preprocess(pid: int) -> bool:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return argv[1:3] == [b"-m", PREPROCESS.encode()]


def decoder_floor_ms(images: list[bytes], rounds: int = 3) -> float:
    """CPU ms per image of the decoder alone on ``images``: one thread, a plain loop (the
    DCT-reduced JPEG decode, resize and crop every placement runs), best of ``rounds``."""
    cv2.setNumThreads(1)
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for data in images:
            decode_image(data, Geometry(), Limits())
        best = min(best, (time.process_time() - start) * 1000 / len(images))
    return best


def envoy_bytes(config: StackConfig) -> int:
    """Bytes every cluster's upstream connections received and sent, so far."""
    found = asyncio.run(
        envoy_admin.stats(config.admin_url, r"^cluster\..*\.upstream_cx_[rt]x_bytes_total$")
    )
    return sum(int(value) for value in found.values())


def children_cpu_seconds() -> float:
    """CPU seconds of this process's finished children (the demo client runs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(
    config: StackConfig,
    *,
    concurrency: int,
    batch: int,
    duration_s: float,
    floor_ms: float,
    warmup_s: float = 3,
    protocol: str = "grpc",
) -> dict[str, Any]:
    """CPU ms per image of each process over one demo-client run against ``config``'s stack."""
    target = f"127.0.0.1:{config.public_port}"
    extra = ("--batch", str(batch), "--protocol", protocol)
    demo_client(target, warmup_s, concurrency, *extra)  # connections, pools, pipelines
    before, client_before = cpu_seconds(config), children_cpu_seconds()
    bytes_before = envoy_bytes(config)
    summary = demo_client(target, duration_s, concurrency, *extra)
    after, client_after = cpu_seconds(config), children_cpu_seconds()
    moved = envoy_bytes(config) - bytes_before
    after[CLIENT], before[CLIENT] = client_after, client_before
    images = summary["images"]
    if not images:
        raise SystemExit(f"no image was answered: {summary}")
    per_image = {row: round((after[row] - before[row]) * 1000 / images, 2) for row in PROCESSES}
    total = sum(per_image.values())
    overhead = total - per_image["triton"] - per_image[CLIENT] - floor_ms
    return {
        "cpu_ms_per_image": per_image,
        "total_cpu_ms_per_image": round(total, 2),
        "decoder_floor_ms_per_image": round(floor_ms, 2),
        "pipeline_overhead_ms_per_image": round(overhead, 2),
        "envoy_kib_per_image": round(moved / images / 1024, 1),
        "images_per_s": round(summary["images_per_s"], 1),
        "images_per_s_per_core": round(1000 / total, 1),
        # cores busy for 1,000 images/s: total ms per image x 1,000 images/s / 1,000 ms/s
        "cores_per_1000_images_per_s": round(total, 1),
        "p50_ms": round(summary["p50_ms"], 1),
        "p99_ms": round(summary["p99_ms"], 1),
        "errors": summary["errors"],
        "images": images,
    }
