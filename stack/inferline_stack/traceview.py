"""The local stack's traces (``INFERLINE_STACK_TRACING=true``): where every process sends its
spans, and the trace view the stack runs when the user names no OTLP endpoint of their own.

With an ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``_TRACES_ENDPOINT``) in ``up``'s environment, every
process reads it, as OpenTelemetry's variables are read everywhere, and the stack adds nothing.
Without one, the stack runs **MLflow**'s tracking server (``make mlflow`` installs it into
``.venv-mlflow``; its data lives under ``<run_dir>/mlflow``): its ``/v1/traces`` takes OTLP over
HTTP/protobuf, and its UI shows each trace as a tree of spans with their attributes, events,
status and links. It was chosen as the one trace backend with a trace view that installs here
from the package registries (PyPI) and keeps span links, which a batch's span is made of
(docs/tracing.md says what else was weighed). Every process then gets the OTLP variables that
point at it, with the header MLflow files the spans under (its default experiment).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from inferline import tracing
from inferline_stack import health
from inferline_stack.config import StackConfig

MLFLOW = "mlflow"
EXPERIMENT = "0"  # MLflow's default experiment: where the stack's traces are filed
EXPERIMENT_HEADER = "x-mlflow-experiment-id"  # MLflow's /v1/traces refuses an export without it
INSTALL_HINT = "`make mlflow` installs it into .venv-mlflow"
VIEW_FILE = "trace-view"  # <run_dir>/trace-view: a trace's URL, {trace_id} for its id


def runs_backend(config: StackConfig, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether the stack runs the trace view: tracing on, and no OTLP endpoint of the user's."""
    return config.tracing and not tracing.traces_endpoint_set(environ)


def otel_env(config: StackConfig, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """What every process of the stack gets for its spans to reach the stack's trace view (none
    when the stack runs none: the environment's own OTLP variables hold, or tracing is off)."""
    if not runs_backend(config, environ):
        return {}
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": config.trace_view_url,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",  # MLflow takes OTLP over HTTP only
        "OTEL_EXPORTER_OTLP_HEADERS": f"{EXPERIMENT_HEADER}={EXPERIMENT}",
    }


def traces_url(config: StackConfig) -> str:
    """The trace view's list of the stack's traces."""
    return f"{config.trace_view_url}/#/experiments/{EXPERIMENT}/traces"


def trace_url_template(config: StackConfig) -> str:
    """One trace's page in the view, ``{trace_id}`` where its 32 hex digits go (MLflow names an
    OpenTelemetry trace ``tr-<trace id>``)."""
    return f"{traces_url(config)}?selectedEvaluationId=tr-{{trace_id}}"


def binary(config: StackConfig) -> str | None:
    """The ``mlflow`` the configuration names, when it is there."""
    path = Path(config.mlflow)
    return str(path.resolve()) if path.is_file() and os.access(path, os.X_OK) else None


def ready(url: str, timeout: float = 2.0) -> bool:
    """The tracking server answers ``/health`` with 200."""
    return health.http_ok(f"{url}/health", timeout)


def write_view_file(config: StackConfig) -> Path:
    """``<run_dir>/trace-view``: the trace URL template, for ``make demo-web``'s links."""
    path = Path(config.run_dir) / VIEW_FILE
    path.write_text(trace_url_template(config) + "\n", encoding="utf-8")
    return path


def forget_view_file(config: StackConfig) -> None:
    (Path(config.run_dir) / VIEW_FILE).unlink(missing_ok=True)
