"""Pre-processing throughput and placement side by side, in one run -> bench/results/.

On one fixed set of 640x480 and 1920x1080 JPEGs (real photos, made in memory):

1. the ceiling: a plain in-process OpenCV decode+resize loop on every usable core;
2. the preprocess service (a real ``python -m preprocess`` process, over gRPC) with each backend
   this machine has, at 1 .. cores workers: images/s, and the ratio to the ceiling;
3. placement: decoding in middleman's process vs calling the service over gRPC — bytes moved
   per image and the latency each call adds (p50, p99), at batch 1 and 16.

The load generator shares the machine's cores with the service (as middleman would); it sends
pre-serialised requests over a raw gRPC channel and does not parse responses, to cost little.
Beside images/s, CPU milliseconds per image (service process + client, from /proc) show the
cost of the placement even on a machine that other work shares.

    python -m bench.preprocessing --duration 10
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cv2
import grpc
import numpy as np
from rich.console import Console
from rich.table import Table
from tritonclient.grpc import service_pb2

from bench.benchlib import RESULTS, jpegs, run_main
from inferline import kserve
from inferline.imaging.decode import Geometry, Limits
from inferline.server import channel_options
from inferline_stack import reaper
from inferline_stack.config import PREPROCESS
from inferline_stack.health import wait_ready
from inferline_stack.services import settings
from inferline_testing.ports import free_port
from middleman.pipeline import InProcessPreprocessor, Preprocessor, RemotePreprocessor
from preprocess.choice import detect
from preprocess.config import usable_cores

SIZES = ((640, 480), (1920, 1080))
START_TIMEOUT_S = 60.0
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"
console = Console()


# -- the image set ----------------------------------------------------------------------------


def image_set(per_size: int) -> dict[str, list[bytes]]:
    """``per_size`` JPEGs per size: each photo, mirrored and at two qualities, round-robin."""
    return {f"{w}x{h}": jpegs(per_size, w, h, qualities=(85, 90)) for w, h in SIZES}


# -- 1. the ceiling ---------------------------------------------------------------------------


def plain_decode(data: bytes, reduced: int) -> np.ndarray[Any, Any]:
    """What anyone would write: (DCT-scaled) decode, shorter side to 256, centre 224, RGB CHW."""
    bgr = cv2.imdecode(np.frombuffer(data, np.uint8), reduced)
    h, w = bgr.shape[:2]
    scale = 256 / min(h, w)
    bgr = cv2.resize(bgr, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_LINEAR)
    h, w = bgr.shape[:2]
    top, left = (h - 224) // 2, (w - 224) // 2
    rgb = cv2.cvtColor(bgr[top : top + 224, left : left + 224], cv2.COLOR_BGR2RGB)
    return np.ascontiguousarray(rgb.transpose(2, 0, 1))


def ceiling(images: list[tuple[bytes, int]], threads: int, duration: float) -> tuple[float, float]:
    """Images/s of ``threads`` threads each running the plain loop for ``duration`` seconds,
    and the CPU milliseconds each image took."""

    def loop(offset: int, deadline: float) -> int:
        done = 0
        while time.perf_counter() < deadline:
            data, reduced = images[(offset + done) % len(images)]
            plain_decode(data, reduced)
            done += 1
        return done

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda i: loop(i, time.perf_counter() + 0.5), range(threads)))  # warm
        start, cpu = time.perf_counter(), time.process_time()
        counts = list(pool.map(lambda i: loop(i * 7, start + duration), range(threads)))
        images_per_s = sum(counts) / (time.perf_counter() - start)
        return images_per_s, (time.process_time() - cpu) * 1000 / sum(counts)


def reduction(size: str) -> int:
    shorter = min(int(d) for d in size.split("x"))
    for factor, flag in ((8, cv2.IMREAD_REDUCED_COLOR_8), (4, cv2.IMREAD_REDUCED_COLOR_4),
                         (2, cv2.IMREAD_REDUCED_COLOR_2)):  # fmt: skip
        if shorter // factor >= 256:
            return flag
    return cv2.IMREAD_COLOR


# -- 2. the service ---------------------------------------------------------------------------


@contextmanager
def service(backend: str, workers: int, max_batch: int) -> Iterator[tuple[str, int]]:
    """A ``python -m preprocess`` process; yields its address and pid once it is ready."""
    port = free_port()
    env = {
        **os.environ,
        "INFERLINE_LOG_LEVEL": "WARNING",
        **settings(
            PREPROCESS,
            host="127.0.0.1",
            port=port,
            metrics_port=free_port(),
            backend=backend,
            workers=workers,
            max_batch=max_batch,
        ),
    }
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "preprocess"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        claim = reaper.Claim.leading(proc.pid)
        url = f"127.0.0.1:{port}"
        try:
            if not wait_ready(url, "preprocess", START_TIMEOUT_S, lambda: proc.poll() is None):
                log.seek(0)
                raise RuntimeError(f"preprocess ({backend}) did not start:\n{log.read().decode()}")
            yield url, proc.pid
        finally:
            reaper.stop([claim], 30.0)
            proc.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc); 0 where unknown."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def request_bytes(images: list[bytes]) -> bytes:
    request = service_pb2.ModelInferRequest(model_name="preprocess")
    request.inputs.add(name="IMAGE", datatype="BYTES", shape=[len(images)])
    request.raw_input_contents.append(kserve.join_bytes(images))
    return bytes(request.SerializeToString())


async def load(
    url: str, payloads: list[tuple[bytes, int]], concurrency: int, duration: float, pid: int
) -> tuple[float, float]:
    """Images/s through ``url`` with ``concurrency`` requests in flight, for ``duration`` s,
    and the CPU milliseconds per image that the service process and this client spent."""
    async with grpc.aio.insecure_channel(url, options=channel_options()) as channel:
        call = channel.unary_unary(MODEL_INFER)  # bytes in, bytes out: no client-side parsing

        async def client(offset: int, deadline: float) -> int:
            done, i = 0, offset
            while time.perf_counter() < deadline:
                payload, count = payloads[i % len(payloads)]
                await call(payload)
                done, i = done + count, i + 1
            return done

        await asyncio.gather(*(client(i, time.perf_counter() + 0.5) for i in range(concurrency)))
        start, cpu = time.perf_counter(), cpu_seconds(pid) + time.process_time()
        counts = await asyncio.gather(*(client(i, start + duration) for i in range(concurrency)))
        elapsed, spent = time.perf_counter() - start, cpu_seconds(pid) + time.process_time() - cpu
        return sum(counts) / elapsed, spent * 1000 / sum(counts)


# -- 3. placement -----------------------------------------------------------------------------


async def latencies(
    preprocess: Preprocessor, batches: list[list[bytes]], calls: int
) -> np.ndarray[Any, Any]:
    geometry = Geometry()
    for batch in batches[:3]:  # warm
        await preprocess(batch, geometry, 30.0)
    times = []
    for i in range(calls):
        start = time.perf_counter()
        await preprocess(batches[i % len(batches)], geometry, 30.0)
        times.append(time.perf_counter() - start)
    return np.array(times) * 1000


async def placement(
    url: str, images: list[bytes], threads: int, calls: int
) -> list[dict[str, Any]]:
    limits = Limits()
    local = InProcessPreprocessor(limits, threads)
    remote = RemotePreprocessor(url, limits)
    rows: list[dict[str, Any]] = []
    try:
        for batch in (1, 16):
            batches = [images[i : i + batch] for i in range(0, len(images) - batch + 1, batch)]
            here = await latencies(local, batches, calls)
            there = await latencies(remote, batches, calls)
            # What crosses the network per image: the request (encoded bytes) and the reply
            # (the uint8 tensor), as serialised KServe messages.
            sent = np.mean([len(request_bytes(b)) for b in batches]) / batch
            reply = service_pb2.ModelInferResponse(model_name="preprocess")
            kserve.add_output(reply, "TENSOR", np.zeros((batch, 3, 224, 224), np.uint8))
            kserve.add_output(reply, "ERRORS", np.array([b""] * batch, dtype=np.object_))
            received = reply.ByteSize() / batch
            for name, ms, moved in (
                ("in process", here, 0.0),
                ("service (gRPC)", there, sent + received),
            ):
                rows.append({
                    "placement": name, "batch": batch, "calls": calls,
                    "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
                    "network_bytes_per_image": float(moved),
                    "request_bytes_per_image": float(sent if moved else 0),
                    "response_bytes_per_image": float(received if moved else 0),
                })  # fmt: skip
            rows.append({
                "placement": "added by the service", "batch": batch, "calls": calls,
                "p50_ms": rows[-1]["p50_ms"] - rows[-2]["p50_ms"],
                "p99_ms": rows[-1]["p99_ms"] - rows[-2]["p99_ms"],
                "network_bytes_per_image": float(sent + received),
            })  # fmt: skip
    finally:
        await local.close()
        await remote.close()
    return rows


# -- the run ----------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per measurement")
    parser.add_argument("--images", type=int, default=16, help="images per size in the set")
    parser.add_argument("--batch", type=int, default=16, help="images per request (throughput)")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    parser.add_argument("--calls", type=int, default=200, help="calls per latency measurement")
    parser.add_argument("--backends", default="", help="comma-separated (default: all available)")
    parser.add_argument("--out", type=Path, default=RESULTS / "preprocess.json")
    args = parser.parse_args()

    cv2.setNumThreads(1)  # as the service does: one core per worker, no hidden thread pool
    cores = usable_cores()
    machine = detect()
    backends = (
        ["opencv"] + (["dali-cpu"] if machine.dali else []) + (["dali-gpu"] if machine.gpus else [])
    )
    if args.backends:
        backends = [b for b in args.backends.split(",") if b]
    sets = image_set(args.images)
    everything = [(d, reduction(size)) for size, batch in sets.items() for d in batch]
    flat = [d for d, _ in everything]
    console.print(
        f"[bold]preprocess benchmark[/]: {cores} core(s) ({cpu_model()}), DALI "
        f"{'yes' if machine.dali else 'no'}, {machine.gpus} GPU(s); {len(flat)} JPEGs "
        f"({', '.join(f'{len(v)} x {k}' for k, v in sets.items())}); {args.duration:g} s each"
    )

    with console.status("ceiling: plain OpenCV loop …"):
        top, top_cpu_ms = ceiling(everything, cores, args.duration)
    payloads = [
        (request_bytes(flat[i : i + args.batch]), len(flat[i : i + args.batch]))
        for i in range(0, len(flat), args.batch)
    ]
    service_rows: list[dict[str, Any]] = []
    for backend in backends:
        for workers in range(1, cores + 1):
            with (
                console.status(f"service: {backend}, {workers} worker(s) …"),
                service(backend, workers, max(args.batch, 16)) as (url, pid),
            ):
                rate, cpu_ms = asyncio.run(
                    load(url, payloads, args.concurrency, args.duration, pid)
                )
            service_rows.append({
                "backend": backend, "workers": workers, "images_per_s": rate,
                "ratio_to_ceiling": rate / top, "cpu_ms_per_image": cpu_ms,
                "cpu_efficiency_vs_ceiling": top_cpu_ms / cpu_ms if cpu_ms else None,
                "batch": args.batch, "concurrency": args.concurrency,
            })  # fmt: skip
    with (
        console.status("placement: in process vs service …"),
        service("opencv", cores, 64) as (url, _),
    ):
        placement_rows = asyncio.run(placement(url, flat, cores, args.calls))

    sizes = {
        k: {"count": len(v), "mean_bytes": float(np.mean([len(d) for d in v]))}
        for k, v in sets.items()
    }
    result = {
        "benchmark": "preprocess",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cores": cores, "cpu": cpu_model(), "dali": machine.dali, "gpus": machine.gpus},
        "settings": vars(args) | {"out": str(args.out)},
        "images": sizes,
        "ceiling": {
            "name": "in-process OpenCV loop (DCT-scaled decode, resize, crop)",
            "threads": cores,
            "images_per_s": top,
            "cpu_ms_per_image": top_cpu_ms,
        },
        "service": service_rows,
        "placement": placement_rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    report(result)
    console.print(f"written to {args.out}")
    return 0


def report(result: dict[str, Any]) -> None:
    table = Table(title="throughput (images/s), 640x480 and 1920x1080 JPEGs")
    columns = ("what", "workers", "images/s", "vs ceiling", "CPU ms/image", "CPU vs ceiling")
    for column in columns:
        table.add_column(column, justify="right" if column != "what" else "left")
    top = result["ceiling"]
    table.add_row(
        "ceiling: OpenCV loop", str(top["threads"]), f"{top['images_per_s']:.0f}", "1.00",
        f"{top['cpu_ms_per_image']:.2f}", "1.00",
    )  # fmt: skip
    for row in result["service"]:
        rate, ratio = f"{row['images_per_s']:.0f}", f"{row['ratio_to_ceiling']:.2f}"
        efficiency = row["cpu_efficiency_vs_ceiling"]
        table.add_row(
            f"service, {row['backend']}", str(row["workers"]), rate, ratio,
            f"{row['cpu_ms_per_image']:.2f}", f"{efficiency:.2f}" if efficiency else "-",
        )  # fmt: skip
    console.print(table)
    table = Table(title="placement: decoding in middleman's process vs the preprocess service")
    for column in ("placement", "batch", "p50 ms", "p99 ms", "network bytes/image"):
        table.add_column(column, justify="right" if column != "placement" else "left")
    for row in result["placement"]:
        p50, p99 = f"{row['p50_ms']:.2f}", f"{row['p99_ms']:.2f}"
        moved = f"{row['network_bytes_per_image']:,.0f}"
        table.add_row(row["placement"], str(row["batch"]), p50, p99, moved)
    console.print(table)


if __name__ == "__main__":
    sys.exit(run_main(main))
