"""Serve an ONNX model of the repository with ONNX Runtime: on the CPU (the local stack's
default), or on an NVIDIA GPU through ONNX Runtime's CUDA or TensorRT execution provider.

The GPU providers need ``onnxruntime-gpu`` in place of ``onnxruntime`` (the same version) and a
CUDA GPU; TensorRT also needs TensorRT's libraries. They are how a GPU machine runs the local
Triton the way the official Triton image runs the repository (config.pbtxt's TensorRT
accelerator), e.g. for ``make bench-gpu``.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig

from inferline_models.binding import Binding, InferFunc, pytriton_tensor
from inferline_models.repository import (
    MAX_QUEUE_DELAY_US,
    ModelSpec,
    load_spec,
    onnx_path,
    tensorrt_parameters,
)

logger = logging.getLogger(__name__)

Provider = Literal["cpu", "cuda", "tensorrt"]
# ONNX Runtime's execution providers for each choice, in its order of preference: a node the
# first cannot run goes to the next (TensorRT leaves what it cannot compile to CUDA).
EXECUTION_PROVIDERS: dict[Provider, tuple[str, ...]] = {
    "cpu": ("CPUExecutionProvider",),
    "cuda": ("CUDAExecutionProvider", "CPUExecutionProvider"),
    "tensorrt": ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"),
}
# Built TensorRT engines (and TensorRT's timing cache), kept between starts: building one takes
# a minute or more, loading it a second. ONNX Runtime names each engine after the graph and the
# GPU's architecture, so a changed model or another kind of GPU gets an engine of its own.
TENSORRT_CACHE = Path(tempfile.gettempdir()) / "inferline-tensorrt"

# config.pbtxt's TensorRT parameters (Triton's ONNX Runtime backend's names) -> ONNX Runtime's
# provider options. The paths are not mirrored: the official image caches under
# /var/cache/tensorrt (a volume of the Triton pod's), a local process under TENSORRT_CACHE.
_TRITON_TO_ORT = {
    "precision_mode": "trt_fp16_enable",
    "max_workspace_size_bytes": "trt_max_workspace_size",
    "trt_engine_cache_enable": "trt_engine_cache_enable",
    "trt_engine_cache_path": "trt_engine_cache_path",
    "trt_timing_cache_enable": "trt_timing_cache_enable",
    "trt_timing_cache_path": "trt_timing_cache_path",
    "trt_profile_min_shapes": "trt_profile_min_shapes",
    "trt_profile_opt_shapes": "trt_profile_opt_shapes",
    "trt_profile_max_shapes": "trt_profile_max_shapes",
}
_ORT_BOOLEANS = {"trt_fp16_enable", "trt_engine_cache_enable", "trt_timing_cache_enable"}


def tensorrt_options(spec: ModelSpec, cache: Path = TENSORRT_CACHE) -> dict[str, str]:
    """ONNX Runtime's TensorRT provider options for ``spec``: what its config.pbtxt asks of the
    official image (:func:`tensorrt_parameters`: FP16, the workspace, cached engines, one profile
    for batch 1..max_batch_size), in ONNX Runtime's spelling, cached under ``cache``.

    A parameter added to config.pbtxt without a translation here fails loudly (KeyError)
    rather than being dropped: the two runtimes must not silently differ.
    """
    size = spec.inputs[0].dims[-1]
    options: dict[str, str] = {}
    for key, value in tensorrt_parameters(spec.max_batch_size, size).items():
        name = _TRITON_TO_ORT[key]
        if name.endswith("_path"):
            value = str(cache)
        elif key == "precision_mode":
            value = str(value == "FP16")
        elif name in _ORT_BOOLEANS:  # Triton writes "1"; ONNX Runtime's Python takes "True"
            value = str(value == "1")
        options[name] = value
    return options


def missing_provider(provider: Provider) -> str | None:
    """Why this ONNX Runtime cannot run ``provider`` (a message that says what to install), or
    None when it can."""
    wanted = EXECUTION_PROVIDERS[provider][0]
    available = ort.get_available_providers()
    if wanted in available:
        return None
    extra = " and TensorRT 10's libraries" if provider == "tensorrt" else ""
    return (
        f"execution provider {provider} ({wanted}) needs onnxruntime-gpu "
        f"(pip uninstall onnxruntime && pip install onnxruntime-gpu=={ort.__version__}, "
        f"matching onnxruntime's version){extra} and a CUDA GPU; "
        f"available: {', '.join(available)}"
    )


def _session_providers(
    provider: Provider, spec: ModelSpec, tensorrt_cache: Path
) -> list[str | tuple[str, dict[str, str]]]:
    """The ``providers`` argument of an ONNX Runtime session for ``provider``."""
    first, *rest = EXECUTION_PROVIDERS[provider]
    if provider != "tensorrt":
        return [first, *rest]
    tensorrt_cache.mkdir(parents=True, exist_ok=True)
    return [(first, tensorrt_options(spec, tensorrt_cache)), *rest]


def default_threads() -> int:
    """CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) or 1


class OnnxRunner:
    """One ONNX Runtime session; `infer(**inputs)` maps input arrays to output arrays.

    ``provider`` cuda or tensorrt runs it on the GPU. ONNX Runtime would quietly run it on
    the CPU when a GPU provider cannot start (no CUDA, cuDNN or TensorRT libraries, no GPU):
    that, or a provider this ONNX Runtime lacks, is a ValueError here instead, so that a GPU
    figure is never a CPU one.
    """

    def __init__(
        self,
        path: Path,
        spec: ModelSpec,
        threads: int,
        provider: Provider = "cpu",
        tensorrt_cache: Path = TENSORRT_CACHE,
    ) -> None:
        if (reason := missing_provider(provider)) is not None:
            raise ValueError(reason)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Idle worker threads spinning for work would take cores from the co-located services.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if provider != "cpu":
            _preload_cuda_libraries()
        self._session = ort.InferenceSession(
            str(path),
            options,
            providers=_session_providers(provider, spec, tensorrt_cache),
            enable_fallback=0,  # never retry on the CPU after a GPU provider's failure
        )
        wanted, running = EXECUTION_PROVIDERS[provider][0], self._session.get_providers()
        if running[0] != wanted:
            raise ValueError(
                f"ONNX Runtime could not start {wanted} and would run on {', '.join(running)}; "
                "its warning above says why (usually CUDA 12 and cuDNN 9 missing: "
                f"pip install 'onnxruntime-gpu[cuda,cudnn]=={ort.__version__}'; for TensorRT, "
                "TensorRT 10's libraries on the library path)"
            )
        have = (
            {i.name for i in self._session.get_inputs()},
            {o.name for o in self._session.get_outputs()},
        )
        want = {t.name for t in spec.inputs}, {t.name for t in spec.outputs}
        if have != want:
            raise ValueError(f"{path}: inputs/outputs {have} do not match config.pbtxt {want}")
        self._outputs = [t.name for t in spec.outputs]
        self.providers: tuple[str, ...] = tuple(running)

    def infer(self, **inputs: npt.NDArray[np.generic]) -> dict[str, npt.NDArray[np.generic]]:
        results = self._session.run(self._outputs, inputs)
        return dict(zip(self._outputs, results, strict=True))


def _preload_cuda_libraries() -> None:
    """Load CUDA and cuDNN from their pip packages (``onnxruntime-gpu[cuda,cudnn]``) where they
    are installed, as ONNX Runtime documents; without them it looks in the system's paths."""
    preload: Any = getattr(ort, "preload_dlls", None)  # onnxruntime >= 1.21
    if preload is not None:
        preload()


def onnx_binding(
    repository: Path,
    model: str,
    *,
    instances: int = 1,
    threads: int | None = None,
    max_queue_delay_us: int = MAX_QUEUE_DELAY_US,
    provider: Provider = "cpu",
    tensorrt_cache: Path = TENSORRT_CACHE,
) -> Binding:
    """The repository's ONNX model as a PyTriton binding with Triton's dynamic batcher on, run
    by ONNX Runtime's ``provider`` (see :class:`OnnxRunner`)."""
    spec = load_spec(repository, model)
    path = onnx_path(repository, model)
    threads = threads or default_threads()
    runners = [OnnxRunner(path, spec, threads, provider, tensorrt_cache) for _ in range(instances)]
    infer_funcs: list[InferFunc] = [batch(runner.infer) for runner in runners]
    logger.info(
        "loaded %s (%d instance(s), %d ONNX Runtime thread(s) each, max_batch_size %d) on %s",
        path,
        instances,
        threads,
        spec.max_batch_size,
        ", ".join(runners[0].providers),
    )
    return Binding(
        name=spec.name,
        infer_funcs=infer_funcs,
        inputs=[pytriton_tensor(t) for t in spec.inputs],
        outputs=[pytriton_tensor(t) for t in spec.outputs],
        config=ModelConfig(
            batching=spec.max_batch_size > 0,
            max_batch_size=spec.max_batch_size,
            batcher=DynamicBatcher(max_queue_delay_microseconds=max_queue_delay_us),
        ),
    )
