"""Part 2, the model on the GPU: the local Triton (PyTriton) with each GPU execution provider of
ONNX Runtime, at each batch size with one request in flight, then saturated."""

from __future__ import annotations

import functools
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from bench.benchlib import PHOTOS
from bench.gpu.params import MODEL, START_TIMEOUT_S
from bench.gpu.report import console
from bench.pipeline.stack import REPOSITORY
from inferline_models.onnx_backend import Provider, missing_provider
from inferline_models.repository import INPUT_NAME, OUTPUT_NAME, load_spec
from inferline_stack.health import wait_ready
from inferline_stack.processes import ProcessTable
from inferline_testing import media
from inferline_testing.ports import free_ports

# The batch sizes, one request in flight; then the largest with SATURATING in flight, so that
# the GPU never waits on a request's trip through gRPC and PyTriton.
BATCHES = (1, 8, 16, 32, 64)
SATURATING = 4
WARMUP_S = 2.0  # per point: CUDA's kernels and cuDNN's algorithm choice for a new batch shape
GPU_PROVIDERS: tuple[Provider, ...] = ("cuda", "tensorrt")


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
