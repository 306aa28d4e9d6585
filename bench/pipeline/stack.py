"""The stack each run measures: the default one on free ports serving a model of the repository,
in the environment a scenario asks for (tracing, per-hop timing)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from bench.benchlib import ROOT, local_stack
from inferline import timing
from inferline_stack.config import StackConfig
from inferline_testing import otlp

REPOSITORY = ROOT / "build" / "model_repository"


@contextmanager
def traced(sampled: float | None) -> Iterator[None]:
    """The stack's environment for tracing: nothing (off), or an OTLP receiver here and the
    sampling ratio (``OTEL_*``, which every process of the stack inherits)."""
    if sampled is None:
        yield
        return
    with otlp.receiver() as (_, endpoint):
        environ = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": str(sampled),
        }
        with mock.patch.dict(os.environ, environ):
            yield


@contextmanager
def timed(on: bool) -> Iterator[None]:
    """The stack's environment for per-hop timing: as it is (on), or off in every process."""
    if on:
        yield
        return
    with mock.patch.dict(os.environ, {timing.ENV: "false"}):
        yield


@contextmanager
def stack(model: str, **overrides: Any) -> Iterator[StackConfig]:
    """The default stack (no Prometheus: it is not on the inference path) serving ``model``."""
    with (
        tempfile.TemporaryDirectory(prefix="inferline-pipeline-") as run_dir,
        local_stack(
            Path(run_dir),
            model_repository=str(REPOSITORY),
            model=model,
            models="",
            prometheus=False,
            **overrides,
        ) as config,
    ):
        yield config
