"""Tracing in the rendered bootstrap: a span per hop to the OTLP collector, sampled as the
services sample, with the headers every export carries."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from inferline_envoy.binary import validate
from inferline_envoy.params import KUBERNETES, LOCAL
from inferline_envoy.render import render


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


@pytest.mark.parametrize(
    ("protocol", "endpoint", "service"),
    [
        ("http/protobuf", "http://collector.example:4318/v1/traces", "http_service"),
        ("grpc", "http://10.0.0.7:4317", "grpc_service"),
    ],
)
def test_tracing_reports_a_span_per_hop_sampled_parent_based_like_the_services(
    protocol: str, endpoint: str, service: str
) -> None:
    params = dataclasses.replace(
        KUBERNETES, otlp_endpoint=endpoint, otlp_protocol=protocol, trace_sampling_percent=2.5
    )
    config = render(params)
    ok, output = validate(config)
    assert ok, output
    listeners = by_name(config["static_resources"]["listeners"])
    for name, _ in params.listeners:
        manager = listeners[name]["filter_chains"][0]["filters"][0]["typed_config"]
        tracer = manager["tracing"]["provider"]["typed_config"]
        assert tracer[service]  # the collector, as the protocol reaches it
        parent_based = tracer["sampler"]["typed_config"]
        ratio = parent_based["wrapped_sampler"]["typed_config"]["sampling_percentage"]
        assert ratio == {"numerator": 25_000, "denominator": "MILLION"}  # 2.5 %
        routes = manager["route_config"]["virtual_hosts"][0]["routes"]
        assert {r["decorator"]["operation"] for r in routes} == {name}  # its spans' name
    probe = listeners["probe"]["filter_chains"][0]["filters"][0]["typed_config"]
    assert "tracing" not in probe  # the kubelet's probes and Prometheus' scrapes: no spans
    otlp = by_name(config["static_resources"]["clusters"])["otlp"]
    host, port = endpoint.removeprefix("http://").split("/")[0].split(":")
    [member] = otlp["load_assignment"]["endpoints"][0]["lb_endpoints"]
    assert member["endpoint"]["address"]["socket_address"] == {
        "address": host,
        "port_value": int(port),
    }
    assert otlp["type"] == ("STATIC" if host[0].isdigit() else "STRICT_DNS")
    assert ("typed_extension_protocol_options" in otlp) == (protocol == "grpc")  # gRPC: h2


def test_without_an_otlp_endpoint_nothing_is_traced() -> None:
    config = render(LOCAL)
    assert "tracing" not in str(config) and "otlp" not in by_name(
        config["static_resources"]["clusters"]
    )


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_every_export_carries_the_headers_the_environment_gives(protocol: str) -> None:
    # OTEL_EXPORTER_OTLP_HEADERS' form: a backend's key, or the project spans are filed under.
    params = dataclasses.replace(
        LOCAL,
        otlp_endpoint="http://127.0.0.1:4318/v1/traces",
        otlp_protocol=protocol,
        otlp_headers="x-mlflow-experiment-id=0, Authorization=Bearer%20a%3Db",
    )
    config = render(params)
    ok, output = validate(config)
    assert ok, output
    manager = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]
    reaching = manager["typed_config"]["tracing"]["provider"]["typed_config"]
    wanted = [("x-mlflow-experiment-id", "0"), ("authorization", "Bearer a=b")]
    if protocol == "grpc":
        sent = [(m["key"], m["value"]) for m in reaching["grpc_service"]["initial_metadata"]]
    else:
        added = reaching["http_service"]["request_headers_to_add"]
        sent = [(h["header"]["key"], h["header"]["value"]) for h in added]
    assert sent == wanted
