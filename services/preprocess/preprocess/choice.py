"""Which backend runs: ``dali-gpu``, ``dali-cpu`` or ``opencv``, and ``auto`` for the best here.

``dali-gpu``: DALI with ``device="mixed"`` (nvJPEG, and the hardware JPEG decoder where the GPU
has one); ``dali-cpu``: DALI's CPU operators; ``opencv``: :mod:`preprocess.opencv`. ``auto``
takes ``dali-gpu`` where DALI sees a GPU and ``opencv`` everywhere else: on the CPU, OpenCV's
JPEG decoder scales in the DCT domain (a 1/2, 1/4 or 1/8 decode when the photo is that much
larger than the crop), which DALI's CPU decoder does not, and ``make bench-preprocess`` measured
it at 2.3 CPU ms per image against DALI-CPU's 5.5 on the same photos. ``dali-cpu`` stays
available by name.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from preprocess.backends import BackendSettings, ImageBackend, VideoBackend
from preprocess.opencv import CpuVideoBackend, OpenCVBackend

logger = logging.getLogger(__name__)


class BackendUnavailable(RuntimeError):
    """The configured backend cannot run here; the message says why and what to do."""


@dataclass(frozen=True)
class Machine:
    dali: bool  # nvidia-dali importable
    gpus: int  # CUDA devices DALI can see


def detect() -> Machine:
    """What this machine can run: DALI installed? How many GPUs does it see?"""
    try:
        from nvidia.dali import backend as dali_backend
    except ImportError:
        return Machine(dali=False, gpus=0)
    try:
        gpus = int(dali_backend.GetCUDADeviceCount())  # type: ignore[attr-defined]
    except RuntimeError as exc:  # no driver, or a broken one: a CPU machine for our purposes
        logger.debug("DALI cannot count CUDA devices: %s", exc)
        gpus = 0
    return Machine(dali=True, gpus=gpus)


def choose(requested: str, machine: Machine) -> str:
    """The backend to run: ``requested`` itself, or for ``auto`` the best this machine has."""
    if requested == "auto":
        return "dali-gpu" if machine.dali and machine.gpus > 0 else "opencv"
    if requested.startswith("dali") and not machine.dali:
        raise BackendUnavailable(
            f"backend {requested!r} needs NVIDIA DALI (pip install 'inferline-preprocess[dali]'); "
            "it is not installed — use backend 'opencv' or 'auto'"
        )
    if requested == "dali-gpu" and machine.gpus == 0:
        raise BackendUnavailable(
            "backend 'dali-gpu' needs a CUDA GPU and DALI sees none — use 'dali-cpu' or 'auto'"
        )
    return requested


def create(name: str, settings: BackendSettings) -> tuple[ImageBackend, VideoBackend]:
    """Build (and warm up) the image and video backends called ``name``."""
    cpu_video = CpuVideoBackend(settings.geometry, settings.video_limits, settings.video_chunk)
    if name == "opencv":
        return OpenCVBackend(settings.geometry, settings.limits, settings.workers), cpu_video
    from preprocess import dali  # imported only here: DALI is optional

    gpu = name == "dali-gpu"
    images = dali.DaliImageBackend(settings, gpu=gpu)
    video: VideoBackend = dali.DaliVideoBackend(settings, cpu_video) if gpu else cpu_video
    return images, video
