"""The dashboards and rules against live data: the session's stack (the real model, every hop
through Envoy) under the demo client's load, scraped by the real Prometheus.

Every panel query (variables substituted as Grafana would, "All" chosen: ``.*``, which matches
the local series' missing ``cluster`` and ``namespace``), every variable's ``label_values``
query, every recording rule and every alert expression evaluates without error through
Prometheus's HTTP API; every panel query returns at least one series, except the GPU panels on
a machine without a GPU, listed in ``GPU_ONLY_PANELS``; every metric a dashboard, rule or alert
names is exported by some process of the stack. Skipped where Prometheus is not installed (and
required in CI).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from grafana.tests.dashboards import (
    GPU_ONLY_PANELS,
    is_gpu_metric,
    metric_names,
    panel_queries,
    variable_queries,
)
from inferline_stack.config import StackConfig
from inferline_stack.processes import ProcessTable
from inferline_stack.prometheus import PROMETHEUS
from inferline_testing import media
from inferline_testing.harness import flowing, load
from inferline_testing.prometheus import query, series, tool

pytestmark = pytest.mark.e2e

RULES = Path(__file__).resolve().parents[1] / "rules"
RATE_INTERVAL = "30s"  # Grafana's $__rate_interval at the tests' 1 s scrape interval, and more
WAIT_S = 120.0  # generous: only bounds how long a broken run takes to fail


def rules() -> list[dict[str, Any]]:
    """Every rule of the recording and alerting files."""
    found: list[dict[str, Any]] = []
    for path in (RULES / "recording.yml", RULES / "alerts.yml"):
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            found += group["rules"]
    return found


@pytest.fixture(scope="module")
async def prometheus(stack: StackConfig) -> AsyncIterator[str]:
    """The stack's Prometheus while the demo client's load runs; yields once every hop's
    series and the recording rules over them are there."""
    tool("prometheus")
    assert ProcessTable(Path(stack.run_dir)).running(PROMETHEUS), "the stack has no Prometheus"
    url = stack.prometheus_url
    photos = [media.cat_jpeg(), media.encode(media.photo("coffee"))]
    async with load(f"127.0.0.1:{stack.public_port}", concurrency=4, images=photos) as recorder:
        await flowing(recorder, 20, WAIT_S)
        rest = asyncio.create_task(rest_calls(f"http://127.0.0.1:{stack.public_port}"))
        for expr in (
            "inferline:images:rate1m > 0",  # the recording rules ran over the load
            'rate(nv_inference_count{job="triton"}[30s]) > 0',
            'rate(envoy_cluster_endpoint_rq_total{envoy_cluster_name="triton"}[30s]) > 0',
        ):
            await series(url, expr, WAIT_S)
            await series(url, "inferline:http_error_ratio:rate1m", WAIT_S)
        try:
            yield url
        finally:
            rest.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await rest
    assert recorder.errors == 0, recorder.errors_by_code


async def rest_calls(public: str) -> None:
    """KServe v2 REST calls beside the gRPC load, a few a second until cancelled (Envoy routes
    them to middleman's REST port), so the REST series the rules read move."""
    paths = ("/v2/health/ready", "/v2/models/classifier", "/v2/models/classifier/ready")
    async with aiohttp.ClientSession() as session:
        while True:
            for path in paths:
                async with session.get(public + path) as response:
                    assert response.status == 200, (path, response.status, await response.text())
            await asyncio.sleep(0.2)  # a pace for background calls, not a wait for readiness


async def test_every_panel_query_has_data(prometheus: str) -> None:
    empty, gpu_only = [], set()
    for query_ in panel_queries(rate_interval=RATE_INTERVAL):
        result = await query(prometheus, query_.expr)  # raises on an error
        if query_.gpu_only:
            gpu_only.add((query_.dashboard, query_.panel))
        elif not result:
            empty.append(f"{query_.dashboard} / {query_.panel}: {query_.expr}")
    assert empty == [], "panel queries with no series:\n" + "\n".join(empty)
    assert gpu_only == set(GPU_ONLY_PANELS)  # every listed panel was queried, without error


async def test_every_variable_query_evaluates(prometheus: str) -> None:
    """The cluster, namespace and model variables' queries evaluate; locally only `model` lists
    values (the local series carry no cluster or namespace label, and "All" still matches)."""
    listed: dict[str, set[str]] = {}
    for variable in variable_queries():
        result = await query(prometheus, variable.expr)  # raises on an error
        values = {str(series_["metric"].get(variable.label, "")) for series_ in result}
        listed.setdefault(variable.variable, set()).update(values - {""})
    assert set(listed) == {"cluster", "namespace", "model"}
    assert listed["model"], "the model variable lists no model under load"


async def test_every_rule_and_alert_evaluates(prometheus: str) -> None:
    recorded = []
    for rule in rules():
        await query(prometheus, rule["expr"])  # raises on an error
        if "record" in rule:
            recorded.append(rule["record"])
    # Under load every recording rule produces its series (at its group's next evaluation).
    for name in sorted(set(recorded)):
        await series(prometheus, name, WAIT_S, f"a series recorded by {name}")


async def test_every_metric_used_is_exported(prometheus: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{prometheus}/api/v1/label/__name__/values") as response,
    ):
        exported = set((await response.json())["data"])
    used: set[str] = set()
    for query_ in panel_queries(rate_interval=RATE_INTERVAL):
        used |= metric_names(query_.expr)
    for rule in rules():
        used |= metric_names(rule["expr"])
    recorded = {rule["record"] for rule in rules() if "record" in rule}
    # GPU metrics need a GPU; kube_* are kube-state-metrics' (a Kubernetes cluster's own).
    missing = sorted(
        n for n in used - exported - recorded if not (is_gpu_metric(n) or n.startswith("kube_"))
    )
    assert missing == [], f"used by a dashboard or rule, exported by no process: {missing}"
