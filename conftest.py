"""Fixtures shared by every suite: the real local stack (Triton + middleman) on free ports."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferline_stack.__main__ import down, up
from inferline_stack.config import StackConfig
from inferline_stack.processes import ProcessTable

ROOT = Path(__file__).parent
MODEL_REPOSITORY = ROOT / "build" / "model_repository"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def model_repository() -> Path:
    """The Triton model repository (`make model`), built once if missing."""
    subprocess.run(
        [sys.executable, "-m", "inferline_models", "--repository", str(MODEL_REPOSITORY)],
        check=True,
    )
    return MODEL_REPOSITORY


@pytest.fixture(scope="session")
def stack(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StackConfig]:
    """The real stack — Triton (PyTriton) and middleman — as processes on free ports."""
    config = StackConfig(
        run_dir=str(tmp_path_factory.mktemp("run")),
        model_repository=str(model_repository),
        public_port=free_port(),
        middleman_metrics_port=free_port(),
        preprocess_port=free_port(),
        preprocess_metrics_port=free_port(),
        triton_grpc_port=free_port(),
        triton_http_port=free_port(),
        triton_metrics_port=free_port(),
    )
    table = ProcessTable(Path(config.run_dir))
    if up(config, table) != 0:
        pytest.fail("the local stack did not start; see the log tail above")
    yield config
    down(config, table)


@pytest.fixture(scope="session")
def public_url(stack: StackConfig) -> str:
    return f"127.0.0.1:{stack.public_port}"
