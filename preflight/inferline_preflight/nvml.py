"""The thin NVML reader: the driver's version, its CUDA version and the GPUs' names, or why not.

NVML comes from nvidia-ml-py (module ``pynvml``), which loads the node's ``libnvidia-ml.so.1``
(the container runtime mounts it into a container that is given a GPU). Where the runtime puts it
off the loader's path (GKE's Google-managed drivers: /usr/local/nvidia/lib64; the GPU Operator's
driver container: /run/nvidia/driver/…), :func:`preload` finds it there first, so that pynvml's
own ``dlopen`` by name gets the library already loaded. Tests inject a fake with the same
functions.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

from inferline_preflight.compat import Driver, Missing, MissingKind

# NVML's return codes (nvml.h; stable across driver releases).
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_DRIVER_NOT_LOADED = 9
LIBRARY = "libnvidia-ml.so.1"
# Where drivers put it when it is not on the loader's path, in the order tried: GKE (its device
# plugin mounts the node's driver at /usr/local/nvidia), the GPU Operator's driver container, and
# the distributions' library directories.
SEARCH = (
    "/usr/local/nvidia/lib64",
    "/run/nvidia/driver/usr/lib/x86_64-linux-gnu",
    "/run/nvidia/driver/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib64",
)


class Nvml(Protocol):
    """The part of ``pynvml`` the reader uses."""

    NVMLError: type[Exception]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str | bytes: ...


def preload(
    search: Sequence[str] = SEARCH, dlopen: Callable[..., object] = ctypes.CDLL
) -> str | None:
    """Load ``libnvidia-ml.so.1`` by name, or else from the first of ``search`` that has it
    (globally, so a later ``dlopen`` by name finds it); which one, or ``None`` if none does."""
    try:
        dlopen(LIBRARY)
        return LIBRARY
    except OSError:
        pass
    for folder in search:
        path = Path(folder) / LIBRARY
        if path.exists():
            try:
                dlopen(str(path), mode=ctypes.RTLD_GLOBAL)
            except OSError:
                continue
            return str(path)
    return None


def load() -> Nvml | Missing:
    """The real NVML bindings (their library found where drivers put it), or why not."""
    preload()
    try:
        return cast(Nvml, importlib.import_module("pynvml"))
    except ImportError as e:
        return Missing(MissingKind.MODULE, f"import pynvml: {e}")


def read(nvml: Nvml | Missing | None = None) -> Driver | Missing:
    """What the node's driver is; never raises for a missing or failing NVML."""
    nvml = load() if nvml is None else nvml
    if isinstance(nvml, Missing):
        return nvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        return _missing(e)
    try:
        version = _text(nvml.nvmlSystemGetDriverVersion())
        try:
            cuda: str | None = cuda_version(nvml.nvmlSystemGetCudaDriverVersion())
        except nvml.NVMLError:
            cuda = None  # drivers before R418 do not say; the version is what matters
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                gpus.append(_text(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(index))))
            except nvml.NVMLError as e:
                gpus.append(f"GPU {index} (name unreadable: {_describe(e)})")
        return Driver(version=version, cuda=cuda, gpus=tuple(gpus))
    except nvml.NVMLError as e:
        return _missing(e)
    finally:
        # Nothing left to release that matters to a process about to exit.
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlShutdown()


def cuda_version(value: int) -> str:
    """NVML's CUDA version number (12040) as text ("12.4")."""
    return f"{value // 1000}.{value % 1000 // 10}"


def _missing(error: Exception) -> Missing:
    code = getattr(error, "value", None)
    if code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return Missing(MissingKind.LIBRARY, f"{LIBRARY} not found")
    if code == NVML_ERROR_DRIVER_NOT_LOADED:
        return Missing(MissingKind.DRIVER, f"NVML: {_describe(error)}")
    return Missing(MissingKind.ERROR, f"NVML: {_describe(error)}")


def _describe(error: Exception) -> str:
    """NVML's words for an error; pynvml's own str() needs the library, which may be absent."""
    try:
        text = str(error)
    except Exception:  # noqa: BLE001 - describing an error must not raise another
        text = ""
    return text or f"error code {getattr(error, 'value', '?')}"


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
