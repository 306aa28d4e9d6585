"""Fixtures shared by every suite: the real local stack on free ports.

The whole pipeline as the user runs it (`make up`): control plane, Envoy, Triton with the real
model, batcher, preprocess and middleman, every hop through Envoy.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferline_stack.config import StackConfig
from inferline_stack.processes import ProcessTable
from inferline_stack.stack import down, up
from inferline_testing.ports import config_on_free_ports

ROOT = Path(__file__).parent
MODEL_REPOSITORY = ROOT / "build" / "model_repository"


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
    """The real stack as processes on free ports; ``public_port`` is Envoy's public listener."""
    config = config_on_free_ports(
        tmp_path_factory.mktemp("run"), model_repository=str(model_repository)
    )
    table = ProcessTable(Path(config.run_dir))
    if up(config, table) != 0:
        pytest.fail("the local stack did not start; see the log tail above")
    yield config
    down(config, table)


@pytest.fixture(scope="session")
def public_url(stack: StackConfig) -> str:
    return f"127.0.0.1:{stack.public_port}"
