"""The machine the benchmark runs on: whether DALI sees a CUDA GPU, and the installed versions
the figures depend on."""

from __future__ import annotations

import importlib.metadata

import onnxruntime as ort

from preprocess.choice import detect


def no_gpu_reason() -> str | None:
    """Why DALI sees no CUDA GPU here, or None when it sees one."""
    machine = detect()
    if not machine.dali:
        return "NVIDIA DALI is not installed: pip install 'inferline-preprocess[dali]'"
    if machine.gpus == 0:
        return "DALI counts 0 CUDA devices: no NVIDIA GPU, driver or CUDA runtime here"
    return None


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
