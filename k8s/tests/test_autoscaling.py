"""Autoscaling as rendered: an HPA chain (scrape labels → recording rule → prometheus-adapter
query → HPA metric) that holds.

* ``promtool test rules`` on the autoscaling rules;
* the HPAs ask for metrics the adapter serves, of objects the manifests make;
* the adapter's queries, with its templates filled in as it fills them for an HPA, evaluated by
  ``promtool test rules`` on series labelled as the scrape configuration labels them.

promtool (Debian's prometheus package) is needed: these skip without it unless
INFERLINE_REQUIRE_TOOLS=1, where they fail.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from k8s.tests.manifests import NAMESPACE, find, render
from k8s.tests.monitoring import AUTOSCALING_RULES, GRAFANA, configmap_data, run_promtool

RULE_TESTS = sorted((AUTOSCALING_RULES / "tests").glob("*.yml"))


# -- the HPA chain -------------------------------------------------------------------------------


def test_promtool_tests_the_autoscaling_rules() -> None:
    assert RULE_TESTS
    run_promtool("check", "rules", str(AUTOSCALING_RULES / "autoscaling.yml"))
    for test in RULE_TESTS:
        run_promtool("test", "rules", str(test))


def adapter_rules(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """prometheus-adapter's rules by the metric name they serve."""
    config = yaml.safe_load(configmap_data(objects, "prometheus-adapter-config")["config.yaml"])
    return {rule["name"]["as"]: rule for rule in config["rules"]}


def test_the_hpas_ask_for_what_the_adapter_serves() -> None:
    objects = render("overlays/gpu")
    served = adapter_rules(objects)
    recorded = {
        rule["record"]
        for path in (GRAFANA / "rules" / "recording.yml", AUTOSCALING_RULES / "autoscaling.yml")
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
        if "record" in rule
    }
    for name, rule in served.items():
        series = rule["seriesQuery"].split("{", 1)[0].strip("'\"")
        assert series in recorded, f"{name}: {series} is no recording rule"
        assert re.search(rule["name"]["matches"], series), name
    hpas = {o["metadata"]["name"]: o for o in objects if o["kind"] == "HorizontalPodAutoscaler"}
    assert set(hpas) == {"triton", "middleman", "batcher", "envoy"}  # in-pod: no preprocess pool
    for hpa in hpas.values():
        target = hpa["spec"]["scaleTargetRef"]
        find(objects, target["kind"], target["name"])
        for metric in hpa["spec"]["metrics"]:
            if metric["type"] == "Resource":  # CPU: every HPA but Triton's
                assert hpa["metadata"]["name"] != "triton"
                continue
            spec = metric[metric["type"].lower()]
            assert spec["metric"]["name"] in served, spec["metric"]["name"]
            if metric["type"] == "Object":
                described = spec["describedObject"]
                find(objects, described["kind"], described["name"])
                overrides = served[spec["metric"]["name"]]["resources"]["overrides"]
                assert described["kind"].lower() in {o["resource"] for o in overrides.values()}
    triton = hpas["triton"]["spec"]
    kinds = [m["type"] for m in triton["metrics"]]
    assert kinds == ["Object", "Pods"], "the batcher's queue first, then Triton's own"
    # The batcher's batches in flight follow the HPA's ceiling (about one per GPU).
    batcher = find(objects, "Deployment", "batcher")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in batcher["env"]}
    assert int(env["INFERLINE_BATCHER_MAX_INFLIGHT"]) == triton["maxReplicas"]
    # The HPAs own the replica counts.
    for name in hpas:
        assert "replicas" not in find(objects, "Deployment", name)["spec"], name


def adapter_query(rule: dict[str, Any], matchers: str, group_by: str) -> str:
    """The adapter's metricsQuery with its templates filled in, as it does for one request."""
    series = rule["seriesQuery"].split("{", 1)[0].strip("'\"")
    return str(
        rule["metricsQuery"]
        .replace("<<.Series>>", series)
        .replace("<<.LabelMatchers>>", matchers)
        .replace("<<.GroupBy>>", group_by)
    )


def test_the_adapter_queries_return_what_the_hpa_should_see(tmp_path: Path) -> None:
    """Series as the scrape configuration labels them → the recording rules → the adapter's
    queries for a Pods metric (two Triton pods) and an Object metric (the Service batcher)."""
    served = adapter_rules(render("overlays/gpu"))

    def target(job: str, pod: str, service: str) -> str:
        return (
            f'job="{job}",instance="10.0.0.1:1",service="{service}",replica="{pod}",'
            f'namespace="{NAMESPACE}",pod="{pod}"'
        )

    def series(name: str, labels: str, values: str) -> dict[str, str]:
        return {"series": f"{name}{{{labels}}}", "values": values}

    triton_a = target("triton", "triton-a", "triton") + ',model="m",version="1"'
    triton_b = target("triton", "triton-b", "triton") + ',model="m",version="1"'
    batcher = target("inferline", "batcher-a", "batcher") + ',model="m"'
    tests = {
        "rule_files": [
            str(GRAFANA / "rules" / "recording.yml"),
            str(AUTOSCALING_RULES / "autoscaling.yml"),
        ],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    # triton-a: 31 requests a sample waiting 20 ms; triton-b: 6 waiting 10 ms.
                    series("nv_inference_queue_duration_us", triton_a, "0+620000x40"),
                    series("nv_inference_request_success", triton_a, "0+31x40"),
                    series("nv_inference_queue_duration_us", triton_b, "0+60000x40"),
                    series("nv_inference_request_success", triton_b, "0+6x40"),
                    # the batcher: 4 requests a sample waiting 0.125 s.
                    series("inferline_batcher_queue_delay_seconds_sum", batcher, "0+0.5x40"),
                    series("inferline_batcher_queue_delay_seconds_count", batcher, "0+4x40"),
                ],
                "promql_expr_test": [
                    {
                        "expr": adapter_query(
                            served["inferline_triton_queue_seconds"],
                            f'namespace="{NAMESPACE}",pod=~"triton-a|triton-b"', "pod",
                        ),
                        "eval_time": "5m",
                        "exp_samples": [
                            {"labels": '{pod="triton-a"}', "value": 0.02},
                            {"labels": '{pod="triton-b"}', "value": 0.01},
                        ],
                    },
                    {
                        "expr": adapter_query(
                            served["inferline_batcher_queue_seconds"],
                            f'namespace="{NAMESPACE}",service="batcher"', "service",
                        ),
                        "eval_time": "5m",
                        "exp_samples": [{"labels": '{service="batcher"}', "value": 0.125}],
                    },
                ],
            }
        ],
    }  # fmt: skip
    path = tmp_path / "adapter_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    run_promtool("test", "rules", str(path))
