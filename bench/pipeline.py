"""CPU the pipeline spends per image, by process, and how its throughput scales out
-> bench/results/pipeline.json.

1. **CPU per image, by placement.** The stack under the demo client in
   each placement (in-pod, the default; remote; in-process), on the simulated GPU at 1 and at 8
   images per request (the model costs no CPU, so what is left is the pipeline's own cost),
   plus the real model (EfficientNet-Lite0 with ONNX Runtime on these cores) and REST. For each
   process (its whole group: Triton's holds PyTriton, tritonserver and its stubs; in-pod, the
   preprocess of the pod counts as preprocess), utime + stime from /proc over the measured run,
   divided by the images answered; the demo client's from its rusage. From the total: images/s
   per core, the cores per 1,000 images/s, and the **pipeline overhead**: total - Triton - the
   demo client - the decoder's own CPU per image on the same photos (a plain single-thread loop,
   measured in the same run), the part that no GPU takes away. And the bytes through Envoy per
   image (every cluster's upstream received + sent).
2. **Scale-out efficiency.** The simulated GPU with its clock slowed (a batch of b takes
   ``t0 + k·b`` = 400 + 10·b ms, at most 8 images) so that these cores are never the limit:
   saturation throughput X(N) at N = 1, 2, 4 Triton replicas, and X(N) / (N·X(1)).

    python -m bench.pipeline [--duration 20] [--scenarios real_1,simulated_1,simulated_8]
                             [--skip-scale-out] [--out PATH] [--compare NAME=IMAGES_PER_S_PER_CORE]

Each placement runs twice, its inner hops dialled proxyless (the default) and through Envoy
(``_envoy``); the default arrangement runs with tracing on too, at the default sampling ratio
and with every request sampled (``simulated_1_traced``, ``_traced_all``), and without per-hop
timing in its answers (``simulated_1_untimed``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import cv2
from rich.console import Console
from rich.table import Table

from bench.benchlib import ROOT, demo_client, local_stack, run_main, write_result
from demo_client.samples import build_samples
from inferline import timing, tracing
from inferline.imaging.decode import Geometry, Limits, decode_image
from inferline_envoy import admin as envoy_admin
from inferline_stack.config import (
    AUTO,
    IN_POD,
    IN_PROCESS,
    PREPROCESS,
    REMOTE,
    TRITON,
    StackConfig,
)
from inferline_stack.processes import ProcessTable
from inferline_stack.replicas import scale
from inferline_testing import otlp
from inferline_testing.overload import stack_groups
from inferline_testing.procfs import group_pids, process_usage

console = Console(width=None if sys.stdout.isatty() else 200)  # a log: no wrapping

REPOSITORY = ROOT / "build" / "model_repository"
CLIENT = "demo client"
# The processes of the inference path, as the table shows them, in the order of a request.
PROCESSES = ("triton", "preprocess", "middleman", "envoy", "batcher", "eds", CLIENT)
SLOW_T0_MS, SLOW_K_MS, SLOW_MAX_BATCH = 400, 10, 8
SLOW_SIMULATED_GPU = (
    f"--simulated-t0-ms {SLOW_T0_MS} --simulated-k-ms {SLOW_K_MS} --max-batch-size {SLOW_MAX_BATCH}"
)


def slow_ceiling(replicas: int) -> float:
    """Images/s of ``replicas`` slowed simulated GPUs each running full batches back to back."""
    return replicas * SLOW_MAX_BATCH * 1000 / (SLOW_T0_MS + SLOW_K_MS * SLOW_MAX_BATCH)


@dataclass(frozen=True)
class Scenario:
    key: str  # its name in pipeline.json
    title: str
    model: str  # simulated_gpu or efficientnet_lite0
    concurrency: int
    batch: int  # images per request
    placement: str = IN_POD  # INFERLINE_STACK_PLACEMENT
    protocol: str = "grpc"  # the demo client's: KServe v2 over gRPC or HTTP/REST
    proxyless: str = AUTO  # INFERLINE_STACK_PROXYLESS: "" dials every inner hop through Envoy
    # Tracing: off (None), or on with this share of requests sampled, every process exporting
    # over OTLP to a receiver in this benchmark's process (its CPU is not the pipeline's)
    sampled: float | None = None
    timed: bool = True  # per-hop timing in every answer (INFERLINE_SERVER_TIMING)


# How the inner hops are dialled: the default (middleman to the batchers proxyless), and every
# hop through Envoy (key suffix ``_envoy``), side by side in every placement.
DIALS = ((AUTO, "", "proxyless to the batchers"), ("", "_envoy", "every hop through Envoy"))


def _placements() -> tuple[Scenario, ...]:
    """The simulated GPU at 1 and 8 images per request in each placement, both dialings."""
    return tuple(
        Scenario(
            f"{key}_{batch}{suffix}",
            f"{placement}, simulated GPU, conc {concurrency}, {batch} image(s)/request, {dial}",
            "simulated_gpu",
            concurrency,
            batch,
            placement=placement,
            proxyless=proxyless,
        )
        for batch, concurrency in ((1, 32), (8, 16))
        for placement, key in ((IN_POD, "simulated"), (REMOTE, "remote"), (IN_PROCESS, "inprocess"))
        for proxyless, suffix, dial in DIALS
    )


def _traced() -> tuple[Scenario, ...]:
    """What tracing costs: the default arrangement at 1 image per request with tracing on, at
    the default sampling ratio and with every request sampled (beside simulated_1: off)."""
    return tuple(
        Scenario(
            f"simulated_1_traced{suffix}",
            f"in-pod, simulated GPU, conc 32, 1 image(s)/request, traced at {ratio:g}",
            "simulated_gpu",
            32,
            1,
            sampled=ratio,
        )
        for ratio, suffix in ((tracing.DEFAULT_RATIO, ""), (1.0, "_all"))
    )


SCENARIOS = (
    *_placements(),
    *_traced(),
    # What per-hop timing in every answer costs: the default arrangement without it.
    Scenario(
        "simulated_1_untimed",
        "in-pod, simulated GPU, conc 32, 1 image(s)/request, no per-hop timing",
        "simulated_gpu",
        32,
        1,
        timed=False,
    ),
    Scenario("real_1", "in-pod, real model, conc 16, 1 image/request", "efficientnet_lite0", 16, 1),
    # The public endpoint's other transport: KServe v2 REST with binary tensors (tritonclient.http).
    Scenario(
        "simulated_1_http",
        "in-pod, simulated GPU, conc 32, 1 image/request, over HTTP/REST",
        "simulated_gpu",
        32,
        1,
        protocol="http",
    ),
)


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


@contextmanager
def traced(sampled: float | None) -> Iterator[None]:
    """The stack's environment for tracing: nothing (off), or an OTLP receiver here and the
    sampling ratio (``OTEL_*``, which every process of the stack inherits)."""
    if sampled is None:
        yield
        return
    with otlp.receiver() as (_, endpoint):
        environ = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": str(sampled),
        }
        with mock.patch.dict(os.environ, environ):
            yield


@contextmanager
def timed(on: bool) -> Iterator[None]:
    """The stack's environment for per-hop timing: as it is (on), or off in every process."""
    if on:
        yield
        return
    with mock.patch.dict(os.environ, {timing.ENV: "false"}):
        yield


@contextmanager
def stack(model: str, **overrides: Any) -> Iterator[StackConfig]:
    """The default stack (no Prometheus: it is not on the inference path) serving ``model``."""
    with (
        tempfile.TemporaryDirectory(prefix="inferline-pipeline-") as run_dir,
        local_stack(
            Path(run_dir),
            model_repository=str(REPOSITORY),
            model=model,
            models="",
            prometheus=False,
            **overrides,
        ) as config,
    ):
        yield config


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


def print_table(results: Mapping[str, Any]) -> None:
    """One row per scenario (its key; the legend below says what each is), a column per
    process and per figure: readable in a log as well as a terminal."""
    table = Table(title="CPU ms per image, by process (utime + stime over the run)")
    table.add_column("scenario")
    figures = (
        ("total_cpu_ms_per_image", "total"),
        ("decoder_floor_ms_per_image", "decoder alone"),
        ("pipeline_overhead_ms_per_image", "overhead"),
        ("envoy_kib_per_image", "KiB via Envoy"),
        ("images_per_s", "images/s"),
    )
    for name in (*PROCESSES, *(label for _, label in figures)):
        table.add_column(name, justify="right")
    for key, r in results.items():
        table.add_row(
            key,
            *(f"{r['cpu_ms_per_image'][p]:.2f}" for p in PROCESSES),
            *(f"[bold]{r[field]}[/bold]" for field, _ in figures),
        )
    console.print(table)
    for key, r in results.items():
        console.print(f"  {key}: {r['title']}")


def parse_compare(item: str, parser: argparse.ArgumentParser) -> tuple[str, float]:
    name, _, figure = item.rpartition("=")
    try:
        value = float(figure)
    except ValueError:
        value = -1.0
    if not name or value <= 0:
        parser.error(f"--compare {item!r}: NAME=IMAGES_PER_S_PER_CORE, a positive figure")
    return name, value


# The default placement's scenarios: what a GPU owner sizes the CPUs by.
DEFAULTS = ("simulated_1", "simulated_8", "real_1")


def print_per_core(results: Mapping[str, Any], compared: Mapping[str, float]) -> None:
    """For the default placement and dialling: cores per 1,000 images/s and images/s per core,
    and any other server's figure given beside them."""
    table = Table(title="what a GPU needs in CPU (the default: in-pod, proxyless to the batchers)")
    table.add_column("scenario")
    table.add_column("images/s per core", justify="right")
    table.add_column("cores per 1,000 images/s", justify="right")
    for key in DEFAULTS:
        if key in results:
            r = results[key]
            table.add_row(
                r["title"], str(r["images_per_s_per_core"]), str(r["cores_per_1000_images_per_s"])
            )
    for name, per_core in compared.items():
        table.add_row(f"{name} (given)", f"{per_core:g}", f"{1000 / per_core:.1f}")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
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
