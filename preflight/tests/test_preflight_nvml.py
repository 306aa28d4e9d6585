"""The NVML reader, against a fake NVML and against the real bindings on this machine."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
from pathlib import Path

import pytest

from inferline_preflight import nvml
from inferline_preflight.compat import Driver, DriverVersion, Missing, MissingKind

from .conftest import (
    DRIVER_NOT_LOADED,
    GPU_IS_LOST,
    LIBRARY_NOT_FOUND,
    NO_PERMISSION,
    FakeNvml,
    FakeNvmlError,
)


def test_reads_driver_cuda_and_gpus() -> None:
    fake = FakeNvml(driver="535.161.08", cuda=12020, gpus=["NVIDIA A100-SXM4-80GB"] * 2)
    assert nvml.read(fake) == Driver(
        version="535.161.08", cuda="12.2", gpus=("NVIDIA A100-SXM4-80GB",) * 2
    )
    assert fake.shut_down


def test_old_bindings_return_bytes() -> None:
    fake = FakeNvml(driver=b"470.57.02", gpus=[b"Tesla T4"])
    assert nvml.read(fake) == Driver(version="470.57.02", cuda="12.6", gpus=("Tesla T4",))


def test_no_gpu_and_no_cuda_version() -> None:
    assert nvml.read(FakeNvml(cuda=None, gpus=[])) == Driver("560.35.03", None, ())


def test_an_unreadable_gpu_name_is_described_not_raised() -> None:
    lost = FakeNvmlError(GPU_IS_LOST, "GPU is lost")
    probe = nvml.read(FakeNvml(gpus=["NVIDIA L4", lost]))
    assert isinstance(probe, Driver)
    assert probe.gpus == ("NVIDIA L4", "GPU 1 (name unreadable: GPU is lost)")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            FakeNvmlError(LIBRARY_NOT_FOUND, ""),  # pynvml cannot describe it without the library
            Missing(MissingKind.LIBRARY, "libnvidia-ml.so.1 not found"),
        ),
        (
            FakeNvmlError(DRIVER_NOT_LOADED, "Driver Not Loaded"),
            Missing(MissingKind.DRIVER, "NVML: Driver Not Loaded"),
        ),
        (
            FakeNvmlError(NO_PERMISSION, "Insufficient Permissions"),
            Missing(MissingKind.ERROR, "NVML: Insufficient Permissions"),
        ),
        (FakeNvmlError(999, ""), Missing(MissingKind.ERROR, "NVML: error code 999")),
    ],
)
def test_init_failures_say_why(error: FakeNvmlError, expected: Missing) -> None:
    fake = FakeNvml(init_error=error)
    assert nvml.read(fake) == expected
    assert not fake.shut_down  # nothing to shut down


def test_a_failure_after_init_still_shuts_down() -> None:
    class Failing(FakeNvml):
        def nvmlDeviceGetCount(self) -> int:
            raise FakeNvmlError(NO_PERMISSION, "Insufficient Permissions")

    fake = Failing()
    assert nvml.read(fake) == Missing(MissingKind.ERROR, "NVML: Insufficient Permissions")
    assert fake.shut_down


def test_missing_bindings_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_module(name: str) -> object:
        raise ModuleNotFoundError(f"No module named {name!r}")

    monkeypatch.setattr(importlib, "import_module", no_module)
    assert nvml.read() == Missing(MissingKind.MODULE, "import pynvml: No module named 'pynvml'")


@pytest.mark.parametrize(("value", "text"), [(12060, "12.6"), (12040, "12.4"), (11080, "11.8")])
def test_cuda_version_numbers(value: int, text: str) -> None:
    assert nvml.cuda_version(value) == text


def test_the_real_bindings_on_this_machine() -> None:
    """No driver here (CI, laptops): the real pynvml says so; on a GPU machine it reads it."""
    probe = nvml.read()
    if ctypes.util.find_library("nvidia-ml") is None:
        assert probe == Missing(MissingKind.LIBRARY, "libnvidia-ml.so.1 not found")
    elif isinstance(probe, Driver):  # a GPU machine: the driver's version reads
        assert DriverVersion.parse(probe.version).branch >= 400


class Loader:
    """dlopen as the dynamic loader answers: by name only what is on its path."""

    def __init__(self, on_path: bool) -> None:
        self.on_path = on_path
        self.opened: list[tuple[str, int]] = []

    def __call__(self, name: str, mode: int = 0) -> object:
        if "/" not in name and not self.on_path:
            raise OSError(f"{name}: cannot open shared object file")
        self.opened.append((name, mode))
        return object()


def test_the_library_is_found_where_gke_mounts_the_driver(tmp_path: Path) -> None:
    """GKE's Google-managed drivers: /usr/local/nvidia/lib64, off the loader's path."""
    missing, gke = tmp_path / "nowhere", tmp_path / "usr-local-nvidia-lib64"
    gke.mkdir()
    (gke / nvml.LIBRARY).write_bytes(b"")
    loader = Loader(on_path=False)
    found = nvml.preload([str(missing), str(gke)], loader)
    assert found == str(gke / nvml.LIBRARY)
    assert loader.opened == [(found, ctypes.RTLD_GLOBAL)]  # global: pynvml's dlopen finds it
    assert nvml.SEARCH[0] == "/usr/local/nvidia/lib64"


def test_the_loaders_path_comes_first_and_nothing_found_is_none(tmp_path: Path) -> None:
    loader = Loader(on_path=True)
    assert nvml.preload([str(tmp_path)], loader) == nvml.LIBRARY
    assert nvml.preload([str(tmp_path)], Loader(on_path=False)) is None
