"""DALI on a GPU: mixed decoding (nvJPEG, and the hardware JPEG decoder where the GPU has one) of
1920x1080 JPEGs at batch 64, its agreement with the CPU paths, and DALI's video decoder
-> bench/results/gpu_preprocess.json.

Needs a CUDA GPU that DALI can see. Without one it prints SKIPPED and exits 0 (or 2 with
--require-gpu). ``--device cpu`` runs the same measurements with DALI's CPU operators, to check
the script itself on a machine without a GPU (its figures then say nothing about GPUs).

    python -m bench.gpu_preprocess --duration 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from bench.benchlib import RESULTS, jpegs, run_main
from inferline.imaging.decode import Geometry, Limits
from inferline.imaging.video import Sampling, VideoLimits
from inferline_testing import media
from preprocess.backends import BackendSettings
from preprocess.choice import detect
from preprocess.config import usable_cores
from preprocess.dali import DaliImageBackend, DaliVideoBackend
from preprocess.opencv import CpuVideoBackend, OpenCVBackend

console = Console()

WIDTH, HEIGHT = 1920, 1080
QUALITIES = (80, 85, 90, 95)


def gpu_name() -> str:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unknown (no nvidia-smi)"
    result = subprocess.run(
        [smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.strip().splitlines()[0] if result.stdout.strip() else "unknown"


async def throughput(backend: Any, batch: list[bytes], concurrency: int, duration: float) -> float:
    """Images/s with ``concurrency`` batches in flight (one per pipeline) for ``duration`` s."""

    async def run(deadline: float) -> int:
        done = 0
        while time.perf_counter() < deadline:
            out = await backend.decode(batch)
            assert not any(out.errors), out.errors
            done += len(batch)
        return done

    await asyncio.gather(*(run(time.perf_counter() + 1.0) for _ in range(concurrency)))  # warm
    start = time.perf_counter()
    counts = await asyncio.gather(*(run(start + duration) for _ in range(concurrency)))
    return sum(counts) / (time.perf_counter() - start)


def settings_for(batch: int, pipelines: int) -> BackendSettings:
    """The preprocess service's decode settings for ``batch`` images at once through
    ``pipelines`` DALI pipelines, its CPU side on every core this process may use."""
    return BackendSettings(
        Geometry(), Limits(), VideoLimits(), workers=usable_cores(), max_batch=batch,
        gpu_pipelines=pipelines,
    )  # fmt: skip


def full_hd_jpegs(count: int) -> list[bytes]:
    """``count`` 1920x1080 JPEGs of real photos at qualities 80-95: what a camera sends."""
    return jpegs(count, WIDTH, HEIGHT, qualities=QUALITIES)


def dali_decode_rate(
    batch_size: int, pipelines: int, duration: float, *, gpu: bool = True
) -> dict[str, Any]:
    """DALI's images/s decoding batches of ``batch_size`` 1920x1080 JPEGs, ``pipelines``
    batches in flight, for ``duration`` s after a second of warm-up: mixed (nvJPEG and the
    hardware decoder) with ``gpu``, else its CPU operators."""
    batch = full_hd_jpegs(batch_size)
    dali = DaliImageBackend(settings_for(batch_size, pipelines), gpu=gpu)
    try:
        rate = asyncio.run(throughput(dali, batch, pipelines, duration))
    finally:
        dali.close()
    return {
        "backend": dali.name,
        "image": f"{WIDTH}x{HEIGHT} JPEG",
        "jpeg_kib_mean": round(float(np.mean([len(b) for b in batch])) / 1024, 1),
        "batch": batch_size,
        "pipelines": pipelines,
        "duration_s": duration,
        "images_per_s": round(rate, 1),
    }


def agreement(ours: np.ndarray[Any, Any], theirs: np.ndarray[Any, Any]) -> dict[str, float]:
    diff = np.abs(ours.astype(np.float32) - theirs.astype(np.float32)).mean(axis=(1, 2, 3))
    return {"mean_abs_diff_mean": float(diff.mean()), "mean_abs_diff_max": float(diff.max())}


def video_check(settings: BackendSettings, device: str) -> dict[str, Any]:
    """DALI's video decoder (NVDEC on ``mixed``) against OpenCV on one clip: frames/s, agreement."""
    codec = "h264_mp4" if media.FFMPEG and device == "mixed" else "vp9_webm"
    frames = media.video_frames(150, 1280, 720)
    data = media.make_video(codec, frames, fps=30.0)
    cpu = CpuVideoBackend(settings.geometry, settings.video_limits, chunk=16)
    dali = DaliVideoBackend(settings, cpu, device=device)
    sampling = Sampling(every_n=1, fps=0.0, max_samples=10_000)
    results = {}
    for name, backend in (("opencv", cpu), (dali.name, dali)):
        start = time.perf_counter()
        reader = backend.open(data, sampling)
        chunks = []
        while (chunk := reader.read_chunk()) is not None:
            chunks.append(chunk)
        reader.close()
        seconds = time.perf_counter() - start
        tensors = np.concatenate([c.tensors for c in chunks])
        results[name] = (tensors, len(tensors) / seconds)
    (cpu_frames, cpu_rate), (dali_frames, dali_rate) = results.values()
    return {
        "codec": codec,
        "frames": len(cpu_frames),
        "size": "1280x720",
        "opencv_frames_per_s": cpu_rate,
        f"{dali.name}_frames_per_s": dali_rate,
        "same_frame_count": len(cpu_frames) == len(dali_frames),
        **(agreement(dali_frames, cpu_frames) if len(cpu_frames) == len(dali_frames) else {}),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per measurement")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--pipelines", type=int, default=2, help="DALI pipelines (concurrency)")
    parser.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    parser.add_argument("--require-gpu", action="store_true", help="exit 2 instead of skipping")
    parser.add_argument("--no-video", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "gpu_preprocess.json")
    args = parser.parse_args()

    machine = detect()
    gpu = args.device == "gpu"
    if not machine.dali:
        console.print(
            "[red]SKIPPED[/]: NVIDIA DALI is not installed (pip install nvidia-dali-cuda120)"
        )
        return 2 if args.require_gpu else 0
    if gpu and machine.gpus == 0:
        console.print(
            "[yellow]SKIPPED[/]: DALI sees no CUDA GPU on this machine; run this on a GPU node "
            "(or pass --device cpu to check the script with DALI's CPU operators)"
        )
        return 2 if args.require_gpu else 0

    cores = usable_cores()
    settings = settings_for(args.batch, args.pipelines)
    geometry, limits = settings.geometry, settings.limits
    batch = full_hd_jpegs(args.batch)
    console.print(
        f"[bold]DALI {'mixed (GPU)' if gpu else 'CPU'}[/]: {args.batch} x 1920x1080 JPEGs "
        f"({np.mean([len(b) for b in batch]) / 1024:.0f} KiB each), {cores} CPU cores, "
        f"GPU: {gpu_name() if gpu else '-'}"
    )
    dali = DaliImageBackend(settings, gpu=gpu)
    reference = DaliImageBackend(settings, gpu=False) if gpu else dali
    opencv = OpenCVBackend(geometry, limits, cores)
    try:
        with console.status("throughput …"):
            rate = asyncio.run(throughput(dali, batch, args.pipelines, args.duration))
            cpu_rate = asyncio.run(throughput(opencv, batch, 1, min(args.duration, 10.0)))
        ours = asyncio.run(dali.decode(batch)).tensors
        result: dict[str, Any] = {
            "benchmark": "gpu_preprocess",
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "backend": dali.name,
            "gpu": gpu_name() if gpu else None,
            "cpu_cores": cores,
            "batch": args.batch,
            "pipelines": args.pipelines,
            "image": "1920x1080 JPEG",
            "images_per_s": rate,
            "opencv_images_per_s_same_machine": cpu_rate,
            "agreement_vs_opencv": agreement(ours, asyncio.run(opencv.decode(batch)).tensors),
        }
        if gpu:
            theirs = asyncio.run(reference.decode(batch)).tensors
            result["agreement_vs_dali_cpu"] = agreement(ours, theirs)
        if not args.no_video:
            with console.status("video …"):
                result["video"] = video_check(settings, "mixed" if gpu else "cpu")
    finally:
        dali.close()
        opencv.close()
        if reference is not dali:
            reference.close()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    table = Table(title=f"{dali.name}: 1920x1080 JPEGs, batch {args.batch}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row(f"{dali.name} images/s", f"{rate:.0f}")
    table.add_row(f"opencv images/s ({cores} threads, same machine)", f"{cpu_rate:.0f}")
    for key in ("agreement_vs_opencv", "agreement_vs_dali_cpu"):
        if key in result:
            figures = result[key]
            table.add_row(
                f"mean abs diff {key.removeprefix('agreement_')} (mean / max image)",
                f"{figures['mean_abs_diff_mean']:.2f} / {figures['mean_abs_diff_max']:.2f}",
            )
    if "video" in result:
        video = result["video"]
        for key, value in video.items():
            table.add_row(
                f"video {key}", f"{value:.2f}" if isinstance(value, float) else str(value)
            )
    console.print(table)
    console.print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
