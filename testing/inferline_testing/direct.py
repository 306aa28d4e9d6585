"""The smallest pipeline around one model: Triton and middleman alone, middleman decoding in
process and calling Triton directly (no Envoy, no batcher), each configured as a user would
(Triton's command line, middleman's settings), on free ports."""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from inferline_stack.config import MIDDLEMAN
from inferline_stack.health import wait_ready
from inferline_stack.processes import ProcessTable
from inferline_stack.services import settings
from inferline_testing.ports import free_port

HOST = "127.0.0.1"
START_TIMEOUT_S = 180.0  # Triton loading the real model on a busy small machine


@contextmanager
def direct_pipeline(
    run_dir: Path, repository: Path, model: str, timeout_s: float = START_TIMEOUT_S
) -> Iterator[str]:
    """Triton serving ``model`` from ``repository``, middleman in front describing it from its
    model card; yields middleman's address once both answer ready."""
    table = ProcessTable(run_dir)
    triton_port, middleman_port = free_port(), free_port()
    triton = f"{HOST}:{triton_port}"
    processes = {
        "triton": (
            [sys.executable, "-m", "inferline_models.triton", f"--repository={repository}",
             f"--model={model}", f"--address={HOST}", f"--grpc-port={triton_port}",
             f"--http-port={free_port()}", f"--metrics-port={free_port()}"],
            {},
            (triton, model),
        ),
        "middleman": (
            [sys.executable, "-m", MIDDLEMAN],
            settings(
                MIDDLEMAN, host=HOST, port=middleman_port, metrics_port=free_port(),
                rest_port=free_port(), triton_url=triton, triton_model=model,
                repository=repository, models="", preprocess_url="", placement="in-process",
            ),
            (f"{HOST}:{middleman_port}", "classifier"),
        ),
    }  # fmt: skip
    try:
        for name, (argv, env, (address, ready_model)) in processes.items():
            table.start(name, argv, env)
            running = functools.partial(table.running, name)
            if not wait_ready(address, ready_model, timeout_s, running):
                raise RuntimeError(
                    f"{name} is not ready after {timeout_s:g}s:\n{table.log_tail(name)}"
                )
        yield f"{HOST}:{middleman_port}"
    finally:
        table.stop_all(list(reversed(processes)))
