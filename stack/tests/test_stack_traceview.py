"""Where the local stack's spans go (inferline_stack.traceview): with tracing on and no OTLP
endpoint of the user's, every process it starts (Envoy, Triton and the control plane included)
is pointed at the stack's own trace view; an endpoint of the user's wins; off, nothing is added."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest

from inferline_stack import envoy as stack_envoy
from inferline_stack import services, stack, traceview
from inferline_stack.config import BATCHER, MIDDLEMAN, TRITON, StackConfig
from inferline_stack.processes import ProcessTable
from inferline_stack.replicas import StackError

HEADER = f"{traceview.EXPERIMENT_HEADER}={traceview.EXPERIMENT}"


@pytest.fixture(autouse=True)
def no_endpoint() -> Iterator[None]:
    """The environment of an `up` that names no OTLP endpoint."""
    with mock.patch.dict(os.environ):
        for name in [n for n in os.environ if n.startswith("OTEL_")]:
            del os.environ[name]
        yield


def every_process_env(config: StackConfig) -> dict[str, dict[str, str]]:
    replicas = [services.replica(config, s, 0) for s in (TRITON, BATCHER, MIDDLEMAN)]
    return {s.name: s.env for s in [services.eds(config), *replicas]}


def test_tracing_on_without_an_endpoint_points_every_process_at_the_trace_view() -> None:
    config = StackConfig(tracing=True, trace_view_port=5123)
    assert traceview.runs_backend(config)
    for name, env in every_process_env(config).items():
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:5123", name
        assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "http/protobuf", name
        assert env["OTEL_EXPORTER_OTLP_HEADERS"] == HEADER, name
    envoy = stack_envoy.params(config)
    assert envoy.otlp_endpoint == "http://127.0.0.1:5123/v1/traces"
    assert envoy.otlp_headers == HEADER


def test_an_endpoint_of_the_users_wins_and_no_trace_view_runs() -> None:
    os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = "http://collector:4318/v1/traces"
    config = StackConfig(tracing=True)
    assert not traceview.runs_backend(config)
    for name, env in every_process_env(config).items():
        assert not [k for k in env if k.startswith("OTEL_")], name  # they read the user's
    assert stack_envoy.params(config).otlp_endpoint == "http://collector:4318/v1/traces"


def test_tracing_off_adds_nothing() -> None:
    config = StackConfig()
    assert not traceview.runs_backend(config)
    for name, env in every_process_env(config).items():
        assert not [k for k in env if k.startswith("OTEL_")], name
    assert not stack_envoy.params(config).otlp_endpoint


def test_turning_tracing_on_restarts_the_services_with_it() -> None:
    off, on = StackConfig(), StackConfig(tracing=True)
    for service in (TRITON, BATCHER, MIDDLEMAN):
        before, after = services.replica(off, service, 0), services.replica(on, service, 0)
        assert before.fingerprint() != after.fingerprint(), service


def test_a_traces_page_is_its_id_in_the_template() -> None:
    config = StackConfig(trace_view_port=5123)
    url = traceview.trace_url_template(config).format(trace_id="ab" * 16)
    assert url == (
        "http://127.0.0.1:5123/#/experiments/0/traces?selectedEvaluationId=tr-" + "ab" * 16
    )


def test_tracing_on_without_mlflow_stops_up_saying_how_to_install_it(tmp_path: Path) -> None:
    config = StackConfig(run_dir=str(tmp_path), tracing=True, mlflow=str(tmp_path / "none"))
    with pytest.raises(StackError, match="make mlflow"):
        stack._trace_view(config, ProcessTable(tmp_path))
    assert not (tmp_path / traceview.VIEW_FILE).exists()
