"""The pipeline on a machine with an NVIDIA GPU -> bench/results/gpu.json: how many CPU cores
one GPU needs.

Three parts (``--parts``, all by default), each a figure the CPU-only benchmarks cannot give:

1. **decode**: DALI's mixed decoder (nvJPEG, and the hardware JPEG decoder where the GPU has
   one) on batches of 64 1920x1080 JPEGs: images/s (``bench.gpu_preprocess`` measures the same
   with its agreement checks).
2. **model**: the repository's EfficientNet-Lite0 on the GPU through the local Triton (PyTriton,
   ``python -m inferline_models.triton --execution-provider cuda|tensorrt``), ONNX Runtime with
   the CUDA and then the TensorRT execution provider (TensorRT as config.pbtxt asks of the
   official image: FP16, one engine for batch 1..64). At batch 1, 8, 16, 32 and 64, one request
   in flight: images/s and p50/p99 latency of tritonclient gRPC calls carrying already decoded
   uint8 batches. Then batch 64 with 4 requests in flight: the most images/s this Triton gets
   out of the GPU ("saturated").
3. **pipeline**: the default local stack with decoding on the GPU (preprocess with
   ``INFERLINE_PREPROCESS_BACKEND=dali-gpu``) and the model on the GPU (TensorRT, or CUDA
   where TensorRT does not start), under the demo client at 1 and 8 images per request: CPU
   ms per image by process (``bench.pipeline``'s table). Then **cores per GPU**: the server
   side's CPU ms per image (every process but the demo client, which stands for the users)
   times the GPU's saturated images/s from part 2, over 1,000 ms: the cores that are busy
   when the pipeline keeps one GPU saturated. ``cores_per_gpu_including_client`` adds the
   demo client's share, for a machine that also generates its own load.

Needs a CUDA GPU that DALI sees: without one it exits 2 saying so, or with
``--skip-if-no-gpu`` (CI) prints SKIPPED and exits 0, writing nothing. The model on the GPU
needs ONNX Runtime's GPU build in place of the CPU one, at the version constraints.txt pins::

    pip uninstall -y onnxruntime
    pip install 'onnxruntime-gpu[cuda,cudnn]==<onnxruntime's version>'

and the TensorRT provider needs TensorRT 10's libraries where the dynamic loader finds them
(e.g. the ``tensorrt-cu12`` wheel's ``tensorrt_libs`` directory on ``LD_LIBRARY_PATH``). A
provider that is missing or does not start is recorded under ``skipped`` with the reason, and
the other parts still run.

Time (``--duration`` D seconds per measurement, default 12), on a GPU machine:
decode ≈ 10 s (JPEGs, DALI pipelines) + 1 s warm-up + D; model, per provider, 6 points x
(2 s warm-up + D) plus Triton's start (≈ 15 s; TensorRT's first engine build ≈ 1-2 min more,
then cached under <tmp>/inferline-tensorrt); pipeline ≈ 40 s for the stack + 2 x (3 s warm-up
+ D + ≈ 4 s for the demo client's processes). About 230 s + 15·D: 410 s ≈ 7 min at D = 12
with a TensorRT build, ≈ 5.5 min with its engine cached, inside the 8 minutes the target gets.

    python -m bench.gpu [--duration 12] [--parts decode,model,pipeline] [--skip-if-no-gpu]
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import tritonclient.grpc as grpcclient
from rich.console import Console
from rich.table import Table
from tritonclient.utils import InferenceServerException

from bench.benchlib import PHOTOS, RESULTS, run_main
from bench.gpu_preprocess import dali_decode_rate, gpu_name
from bench.pipeline.measure import CLIENT, decoder_floor_ms, measure
from bench.pipeline.report import print_table
from bench.pipeline.stack import REPOSITORY, stack
from demo_client.samples import build_samples
from inferline_models.onnx_backend import Provider, missing_provider
from inferline_models.repository import INPUT_NAME, OUTPUT_NAME, load_spec, onnx_path
from inferline_stack.health import wait_ready
from inferline_stack.processes import ProcessTable
from inferline_testing import media
from inferline_testing.ports import free_ports
from preprocess.choice import detect
from preprocess.config import usable_cores

console = Console()
errors = Console(stderr=True)

PARTS = ("decode", "model", "pipeline")
MODEL = "efficientnet_lite0"
DEFAULT_DURATION_S = 12.0
# decode: the batch the preprocess service hands DALI at most, two pipelines in flight (its
# default), as bench.gpu_preprocess measures.
DECODE_BATCH, DECODE_PIPELINES = 64, 2
# model: the batch sizes, one request in flight; then the largest with SATURATING in flight, so
# that the GPU never waits on a request's trip through gRPC and PyTriton.
BATCHES = (1, 8, 16, 32, 64)
SATURATING = 4
WARMUP_S = 2.0  # per point: CUDA's kernels and cuDNN's algorithm choice for a new batch shape
GPU_PROVIDERS: tuple[Provider, ...] = ("cuda", "tensorrt")
# Triton's start: TensorRT builds its engine the first time (a minute or two); then cached.
START_TIMEOUT_S = 600.0
# pipeline: (images per request, requests in flight), as bench.pipeline loads the simulated GPU.
PIPELINE_LOADS = ((1, 32), (8, 16))


def no_gpu_reason() -> str | None:
    """Why DALI sees no CUDA GPU here, or None when it sees one."""
    machine = detect()
    if not machine.dali:
        return "NVIDIA DALI is not installed: pip install 'inferline-preprocess[dali]'"
    if machine.gpus == 0:
        return "DALI counts 0 CUDA devices: no NVIDIA GPU, driver or CUDA runtime here"
    return None


def _parts(text: str) -> tuple[str, ...]:
    chosen = {p.strip() for p in text.split(",") if p.strip()}
    if not chosen or not chosen <= set(PARTS):
        raise argparse.ArgumentTypeError(f"a comma-separated choice of {','.join(PARTS)}")
    return tuple(p for p in PARTS if p in chosen)  # always in the order above


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.gpu",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--duration",
        type=_positive_float,
        default=DEFAULT_DURATION_S,
        help="seconds per measurement (default %(default)g: the whole run in about 7 minutes)",
    )
    parser.add_argument(
        "--parts",
        type=_parts,
        default=PARTS,
        help=f"which parts, comma-separated (default: {','.join(PARTS)})",
    )
    parser.add_argument(
        "--skip-if-no-gpu",
        action="store_true",
        help="without a CUDA GPU print SKIPPED and exit 0 (CI) instead of exiting 2",
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "gpu.json", help="default: %(default)s"
    )
    return parser.parse_args(argv)


# -- model ---------------------------------------------------------------------------------


class TritonFailed(Exception):
    """The local Triton did not start, or a call to it failed: the provider is skipped."""


def model_images(count: int) -> npt.NDArray[np.uint8]:
    """``count`` photos as the model takes them (uint8 RGB, NCHW, its input size): the
    pipeline's decoding already done, so that only the model and its transport are timed."""
    _, height, width = load_spec(REPOSITORY, MODEL).inputs[0].dims
    photos = [media.photo_at(PHOTOS[i % len(PHOTOS)], width, height) for i in range(count)]
    return np.ascontiguousarray(np.stack([p.transpose(2, 0, 1) for p in photos]))


@contextmanager
def local_triton(provider: Provider, run_dir: Path) -> Iterator[str]:
    """``python -m inferline_models.triton`` serving the model with ``provider`` on free ports,
    stopped on exit; yields its gRPC address once the model is ready."""
    grpc_port, http_port, metrics_port = free_ports(3)
    name = f"triton-{provider}"
    argv = [
        sys.executable, "-m", "inferline_models.triton", f"--repository={REPOSITORY}",
        f"--model={MODEL}", "--address=127.0.0.1", f"--grpc-port={grpc_port}",
        f"--http-port={http_port}", f"--metrics-port={metrics_port}",
        f"--execution-provider={provider}",
    ]  # fmt: skip
    address = f"127.0.0.1:{grpc_port}"
    table = ProcessTable(run_dir)
    table.start(name, argv, {})
    try:
        running = functools.partial(table.running, name)
        if not wait_ready(address, MODEL, START_TIMEOUT_S, running):
            raise TritonFailed(f"Triton with {provider} did not start:\n{table.log_tail(name, 12)}")
        yield address
    finally:
        table.stop_all([name])


def timed_infers(
    address: str, images: npt.NDArray[np.uint8], in_flight: int, duration: float
) -> dict[str, Any]:
    """``in_flight`` clients (a thread each) sending ``images`` as one request after another,
    for WARMUP_S and then ``duration`` s: what the measured calls (sent after the warm-up)
    took, and their images/s from the end of the warm-up to the last answer."""
    start = time.perf_counter() + WARMUP_S
    end = start + duration

    def client_loop() -> list[tuple[float, float]]:
        client = grpcclient.InferenceServerClient(address)
        request = grpcclient.InferInput(INPUT_NAME, list(images.shape), "UINT8")
        request.set_data_from_numpy(images)
        outputs = [grpcclient.InferRequestedOutput(OUTPUT_NAME)]
        calls = []
        try:
            while (sent := time.perf_counter()) < end:
                client.infer(MODEL, [request], outputs=outputs)
                if sent >= start:
                    calls.append((sent, time.perf_counter()))
        finally:
            client.close()
        return calls

    try:
        with ThreadPoolExecutor(in_flight) as pool:
            futures = [pool.submit(client_loop) for _ in range(in_flight)]
            calls = [call for future in futures for call in future.result()]
    except InferenceServerException as exc:
        raise TritonFailed(f"an inference call failed: {exc}") from exc
    if not calls:
        raise TritonFailed(f"no call was answered within {duration:g} s")
    latencies_ms = np.array([(done - sent) * 1000 for sent, done in calls])
    window = max(done for _, done in calls) - start
    return {
        "batch": len(images),
        "in_flight": in_flight,
        "calls": len(calls),
        "images_per_s": round(len(calls) * len(images) / window, 1),
        "p50_ms": round(float(np.percentile(latencies_ms, 50)), 2),
        "p99_ms": round(float(np.percentile(latencies_ms, 99)), 2),
    }


def model_on(provider: Provider, images: npt.NDArray[np.uint8], duration: float) -> dict[str, Any]:
    """Every batch size with one request in flight, then the saturated point, on one Triton."""
    label = f"model, {provider}"
    with tempfile.TemporaryDirectory(prefix="inferline-gpu-") as run_dir, ExitStack() as triton:
        with console.status(
            f"{label}: starting Triton (TensorRT's first build: a minute or two) …"
        ):
            address = triton.enter_context(local_triton(provider, Path(run_dir)))
        points: dict[str, Any] = {}
        for batch in BATCHES:
            with console.status(f"{label}: batch {batch}, {duration:g} s …"):
                point = timed_infers(address, images[:batch], 1, duration)
            points[str(batch)] = point
            console.print(
                f"{label}: batch {batch}: {point['images_per_s']:.0f} images/s, "
                f"p50 {point['p50_ms']:.1f} ms"
            )
        with console.status(f"{label}: batch {len(images)}, {SATURATING} in flight …"):
            saturated = timed_infers(address, images, SATURATING, duration)
        console.print(
            f"{label}: saturated (batch {len(images)}, {SATURATING} in flight): "
            f"{saturated['images_per_s']:.0f} images/s"
        )
    return {"batches": points, "saturated": saturated}


def model_part(duration: float, skipped: dict[str, str]) -> dict[str, Any]:
    """{provider: figures} for each GPU provider that runs; the others go to ``skipped``."""
    results: dict[str, Any] = {}
    images = model_images(max(BATCHES))
    for provider in GPU_PROVIDERS:
        reason = missing_provider(provider)
        if reason is None:
            try:
                results[provider] = model_on(provider, images, duration)
            except TritonFailed as exc:
                reason = str(exc)
        if reason is not None:
            skipped[f"model.{provider}"] = reason
            console.print(f"[yellow]skipped[/] model, {provider}: {reason}", soft_wrap=True)
    return results


# -- pipeline ------------------------------------------------------------------------------


@contextmanager
def environment(**values: str) -> Iterator[None]:
    """``values`` in os.environ (the stack's processes inherit it), restored on exit."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def pipeline_provider(model: dict[str, Any] | None) -> tuple[Provider | None, str]:
    """The GPU provider for the stack's Triton: TensorRT where it runs, else CUDA; with the
    model part's results, one that ran there. (None, why) when there is none."""
    for provider in ("tensorrt", "cuda"):
        if model is not None and provider not in model:
            continue
        if missing_provider(provider) is None:
            return provider, ""
    if model is not None:
        return None, "no GPU execution provider ran in the model part (see its reasons)"
    return None, missing_provider("cuda") or ""


def pipeline_part(
    duration: float, model: dict[str, Any] | None, skipped: dict[str, str]
) -> dict[str, Any] | None:
    """The stack with decoding and the model on the GPU: CPU ms per image by process at 1 and
    8 images per request, and the cores one saturated GPU keeps busy."""
    provider, reason = pipeline_provider(model)
    if provider is None:
        skipped["pipeline"] = reason
        console.print(f"[yellow]skipped[/] pipeline: {reason}", soft_wrap=True)
        return None
    scenarios: dict[str, Any] = {}
    try:
        with environment(INFERLINE_PREPROCESS_BACKEND="dali-gpu"), ExitStack() as running:
            with console.status(f"pipeline: starting the stack (dali-gpu, {provider}) …"):
                config = running.enter_context(
                    stack(
                        MODEL,
                        triton_args=f"--execution-provider {provider}",
                        start_timeout_s=START_TIMEOUT_S,
                    )
                )
            for batch, concurrency in PIPELINE_LOADS:
                title = f"GPU ({provider}), conc {concurrency}, {batch} image(s)/request"
                with console.status(f"pipeline: {title}, {duration:g} s …"):
                    floor = decoder_floor_ms([p.read_bytes() for p in build_samples()])
                    result = measure(
                        config,
                        concurrency=concurrency,
                        batch=batch,
                        duration_s=duration,
                        floor_ms=floor,
                    )
                scenarios[str(batch)] = {
                    "title": title,
                    "images_per_request": batch,
                    "concurrency": concurrency,
                    **result,
                }
                console.print(
                    f"pipeline, {batch} image(s)/request: {result['total_cpu_ms_per_image']} "
                    f"CPU ms/image, {result['images_per_s']} images/s"
                )
    except SystemExit as exc:  # the stack did not start, or answered nothing
        skipped["pipeline"] = f"{exc} (the stack's log tail is above)"
        console.print(f"[yellow]skipped[/] pipeline: {skipped['pipeline']}", soft_wrap=True)
        return None
    print_table(scenarios)
    gpu_rate = (model or {}).get(provider, {}).get("saturated", {}).get("images_per_s")
    return {
        "provider": provider,
        "preprocess_backend": "dali-gpu",
        "scenarios": scenarios,
        "gpu_images_per_s": gpu_rate,
        **cores_per_gpu(scenarios, gpu_rate),
    }


def cores_per_gpu(scenarios: dict[str, Any], gpu_rate: float | None) -> dict[str, Any]:
    """CPU ms per image x the GPU's saturated images/s / 1,000 ms: the cores busy while the
    pipeline keeps one GPU saturated, per scenario (images per request)."""
    if gpu_rate is None:
        why = "needs the model part's saturated images/s for the same provider (--parts model)"
        return {"cores_per_gpu": None, "cores_per_gpu_note": why}
    server, everything = {}, {}
    for key, result in scenarios.items():
        total = result["total_cpu_ms_per_image"]
        client = result["cpu_ms_per_image"].get(CLIENT, 0.0)
        server[key] = round((total - client) * gpu_rate / 1000, 1)
        everything[key] = round(total * gpu_rate / 1000, 1)
    return {"cores_per_gpu": server, "cores_per_gpu_including_client": everything}


# -- the run -------------------------------------------------------------------------------


def versions() -> dict[str, str | None]:
    """The installed distributions whose versions the figures depend on (None: not installed)."""
    names = ("nvidia-dali-cuda120", "onnxruntime", "onnxruntime-gpu", "tensorrt", "nvidia-pytriton")
    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    found["onnxruntime (imported)"] = ort.__version__
    return found


def summary(result: dict[str, Any]) -> None:
    table = Table(title=f"GPU: {result['gpu']}, {result['cpu_cores']} CPU cores")
    table.add_column("measure")
    table.add_column("value", justify="right")
    if "decode" in result:
        decode = result["decode"]
        table.add_row(
            f"{decode['backend']} decode, batch {decode['batch']} of 1080p JPEGs",
            f"{decode['images_per_s']:.0f} images/s",
        )
    for provider, figures in result.get("model", {}).items():
        for batch, point in figures["batches"].items():
            table.add_row(
                f"model, {provider}, batch {batch}",
                f"{point['images_per_s']:.0f} images/s, p50 {point['p50_ms']:.1f} ms",
            )
        table.add_row(
            f"model, {provider}, saturated", f"{figures['saturated']['images_per_s']:.0f} images/s"
        )
    pipeline = result.get("pipeline")
    if pipeline and pipeline.get("cores_per_gpu"):
        for key, cores in pipeline["cores_per_gpu"].items():
            table.add_row(
                f"cores per GPU ({pipeline['provider']}), {key} image(s)/request",
                f"{cores:.1f}",
                style="bold",
            )
    for what in result["skipped"]:
        table.add_row(f"{what}", "skipped (why: above, and in the JSON)", style="yellow")
    console.print(table)


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
