"""A fake NVML (the functions of ``pynvml`` the reader calls) for the preflight's tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

# nvml.h's return codes, as pynvml raises them (NVMLError(value)).
LIBRARY_NOT_FOUND = 12
DRIVER_NOT_LOADED = 9
NO_PERMISSION = 4
GPU_IS_LOST = 15


class FakeNvmlError(Exception):
    """pynvml's NVMLError: ``value`` is NVML's return code, str() its description."""

    def __init__(self, value: int, text: str = "") -> None:
        super().__init__(value)
        self.value = value
        self.text = text

    def __str__(self) -> str:
        return self.text


class FakeNvml:
    """What a node's NVML would answer; ``init_error`` makes nvmlInit fail like pynvml does."""

    NVMLError: type[Exception] = FakeNvmlError

    def __init__(
        self,
        driver: str | bytes = "560.35.03",
        cuda: int | None = 12060,
        gpus: Sequence[str | bytes | FakeNvmlError] = ("NVIDIA L4",),
        init_error: FakeNvmlError | None = None,
    ) -> None:
        self.driver = driver
        self.cuda = cuda
        self.gpus = list(gpus)
        self.init_error = init_error
        self.initialised = False
        self.shut_down = False

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error
        self.initialised = True

    def nvmlShutdown(self) -> None:
        assert self.initialised, "nvmlShutdown without nvmlInit"
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        if self.cuda is None:
            raise FakeNvmlError(3, "Not Supported")
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return index

    def nvmlDeviceGetName(self, handle: Any) -> str | bytes:
        name = self.gpus[int(handle)]
        if isinstance(name, FakeNvmlError):
            raise name
        return name


@pytest.fixture
def fake_nvml() -> type[FakeNvml]:
    return FakeNvml
