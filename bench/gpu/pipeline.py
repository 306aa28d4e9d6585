"""Part 3, the pipeline with the GPU: the stack with decoding and the model on it, CPU ms per
image by process, and the cores one saturated GPU keeps busy."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from bench.gpu.params import MODEL, START_TIMEOUT_S
from bench.gpu.report import console
from bench.pipeline.measure import CLIENT, decoder_floor_ms, measure
from bench.pipeline.report import print_table
from bench.pipeline.stack import stack
from demo_client.samples import build_samples
from inferline_models.onnx_backend import Provider, missing_provider

# (images per request, requests in flight), as bench.pipeline loads the simulated GPU.
PIPELINE_LOADS = ((1, 32), (8, 16))


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
