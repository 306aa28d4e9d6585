"""components/tracing: every hop's spans to one OpenTelemetry Collector, set the way the local
stack sets them (the code's one source of each fact: inferline.tracing, Envoy's renderer,
inferline_models.triton.trace_config), and on to the backend named in one place."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from inferline import tracing
from inferline_models.triton import trace_config
from k8s.tests.manifests import containers, envoy_bootstrap, find, render

TARGETS = ("everything", "everything/remote", "everything/in-process", "components/tracing")
# Every inferline service container that exports spans itself (Envoy and Triton by their flags).
SERVICES = {"middleman", "batcher", "eds", "preprocess"}
COLLECTOR = "otel-collector"


def otel_environment(objects: list[dict[str, Any]]) -> dict[str, str]:
    data: dict[str, str] = find(objects, "ConfigMap", "tracing")["data"]
    return data


@pytest.mark.parametrize("target", TARGETS)
def test_every_service_reads_the_tracing_settings(target: str) -> None:
    objects = render(target)
    name = find(objects, "ConfigMap", "tracing")["metadata"]["name"]
    found = set()
    for container in containers(objects):
        if container.name in SERVICES and container.image.startswith("inferline/"):
            assert {"configMapRef": {"name": name, "optional": True}} in container.spec.get(
                "envFrom", []
            ), container.where
            found.add(container.name)
    decoders = set() if target.endswith("in-process") else {"preprocess"}  # the pool or the pod's
    assert found == {"middleman", "batcher", "eds"} | decoders
    environ = otel_environment(objects)
    assert tracing.enabled(environ)
    service = find(objects, "Service", COLLECTOR)
    http = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "otlp-http")
    assert environ["OTEL_EXPORTER_OTLP_ENDPOINT"] == f"http://{COLLECTOR}:{http}"


@pytest.mark.parametrize("target", TARGETS)
def test_envoy_and_triton_send_to_the_same_collector_sampling_as_the_services(
    target: str,
) -> None:
    objects = render(target)
    environ = otel_environment(objects)
    params = envoy_bootstrap(objects).params
    assert params.otlp_endpoint == tracing.traces_endpoint(environ)
    assert params.otlp_protocol == tracing.protocol(environ)
    assert params.trace_sampling_percent == 100 * tracing.sampling_ratio(environ)
    triton = next(c for c in containers(objects) if c.name == "triton")
    flags = [a.removeprefix("--trace-config=") for a in triton.spec["args"]
             if a.startswith("--trace-config=")]  # fmt: skip
    assert flags == trace_config(environ)  # as the local stack's Triton is started


def test_the_collector_sends_to_the_backend_named_in_one_place() -> None:
    objects = render("components/tracing")
    backend = find(objects, "ConfigMap", "tracing-backend")
    collector = find(objects, "Deployment", COLLECTOR)["spec"]["template"]["spec"]
    [container] = collector["containers"]
    env = {e["name"]: e["valueFrom"]["configMapKeyRef"] for e in container["env"]
           if "valueFrom" in e}  # fmt: skip
    assert env["TRACES_BACKEND"] == {"name": backend["metadata"]["name"], "key": "endpoint"}
    assert env["TRACES_BACKEND_INSECURE"]["key"] == "insecure"
    config = yaml.safe_load(
        find(objects, "ConfigMap", "otel-collector-config")["data"]["collector.yaml"]
    )
    assert config["exporters"]["otlp"]["endpoint"] == "${env:TRACES_BACKEND}"
    pipeline = config["service"]["pipelines"]["traces"]
    assert pipeline == {"receivers": ["otlp"], "processors": ["memory_limiter", "batch"],
                        "exporters": ["otlp"]}  # fmt: skip
    ports = {p["containerPort"] for p in container["ports"]}
    receivers = config["receivers"]["otlp"]["protocols"]
    assert {int(r["endpoint"].rsplit(":", 1)[1]) for r in receivers.values()} <= ports


def test_grafana_links_exemplars_to_the_tempo_data_source() -> None:
    objects = render("everything")
    tempo = yaml.safe_load(
        find(objects, "ConfigMap", "grafana-datasource-tempo")["data"]["tempo.yml"]
    )
    [source] = tempo["datasources"]
    prometheus = yaml.safe_load(
        find(objects, "ConfigMap", "grafana-datasources")["data"]["prometheus.yml"]
    )
    [links] = prometheus["datasources"][0]["jsonData"]["exemplarTraceIdDestinations"]
    assert links == {"name": "trace_id", "datasourceUid": source["uid"]}  # what metrics emit
    grafana = find(objects, "Deployment", "grafana")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("valueFrom") for e in grafana["containers"][0]["env"]}
    backend = find(objects, "ConfigMap", "tracing-backend")["metadata"]["name"]
    assert env["TEMPO_URL"]["configMapKeyRef"]["name"] == backend
