"""EndpointSlice -> endpoints, the pure translation used by the Kubernetes source."""

from __future__ import annotations

from typing import Any

import pytest

from eds.cache import Endpoint, Health
from eds.sources import endpointslice as es


def slice_(
    items: list[dict[str, Any]],
    ports: list[dict[str, Any]] | None = None,
    address_type: str = "IPv4",
    service: str = "triton",
) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{service}-abc", "labels": {es.SERVICE_LABEL: service}},
        "addressType": address_type,
        "ports": [{"name": "grpc", "port": 8001, "protocol": "TCP"}] if ports is None else ports,
        "endpoints": items,
    }


def item(
    ip: str, pod: str = "", uid: str = "", zone: str = "", **conditions: bool | None
) -> dict[str, Any]:
    out: dict[str, Any] = {"addresses": [ip], "conditions": conditions}
    if pod:
        out["targetRef"] = {"kind": "Pod", "name": pod, "uid": uid or f"uid-{pod}"}
    if zone:
        out["zone"] = zone
    return out


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ({"ready": True, "serving": True, "terminating": False}, Health.HEALTHY),
        ({"ready": True}, Health.HEALTHY),
        ({}, Health.HEALTHY),  # the API: a missing `ready` means ready
        ({"ready": False, "serving": True, "terminating": True}, Health.DRAINING),
        ({"ready": False, "serving": False, "terminating": True}, Health.UNHEALTHY),
        ({"ready": False, "serving": False, "terminating": False}, Health.UNHEALTHY),
        ({"ready": False}, Health.UNHEALTHY),
        ({"terminating": True}, Health.UNHEALTHY),
    ],
)
def test_conditions_map_to_health(conditions: dict[str, bool], expected: Health) -> None:
    assert es.health(conditions) is expected


def test_endpoints_carry_port_zone_pod_name_and_weight() -> None:
    slices = [
        slice_(
            [
                item("10.0.0.1", "triton-a", zone="us-east-1a", ready=True),
                item("10.0.0.2", "triton-b", zone="us-east-1b", ready=False, serving=True,
                     terminating=True),
            ]
        )
    ]  # fmt: skip
    endpoints = es.endpoints(slices, "grpc", {"uid-triton-a": 2})
    assert sorted(endpoints) == [
        Endpoint("10.0.0.1", 8001, Health.HEALTHY, 2, "us-east-1a", "triton-a"),
        Endpoint("10.0.0.2", 8001, Health.DRAINING, 1, "us-east-1b", "triton-b"),
    ]
    assert es.pods_of(slices) == [("uid-triton-a", "triton-a"), ("uid-triton-b", "triton-b")]


def test_the_named_port_wins_and_a_single_port_needs_no_name() -> None:
    two = [{"name": "metrics", "port": 8002}, {"name": "grpc", "port": 8001}]
    assert es.port_of(slice_([], two), "grpc") == 8001
    assert es.port_of(slice_([], [{"name": "", "port": 9000}]), "grpc") == 9000
    assert (
        es.port_of(slice_([], [{"name": "a", "port": 1}, {"name": "b", "port": 2}]), "grpc") is None
    )
    assert es.endpoints([slice_([item("10.0.0.1")], [])], "grpc") == ()


def test_an_address_in_two_slices_counts_once_with_its_best_health() -> None:
    old = slice_([item("10.0.0.1", ready=False, serving=True, terminating=True)])
    new = slice_([item("10.0.0.1", ready=True)])
    [endpoint] = es.endpoints([old, new], "grpc")
    assert endpoint.health is Health.HEALTHY
    [endpoint] = es.endpoints([new, old], "grpc")
    assert endpoint.health is Health.HEALTHY


def test_fqdn_slices_and_endpoints_without_addresses_are_skipped() -> None:
    assert es.endpoints([slice_([item("triton.example.com")], address_type="FQDN")], "grpc") == ()
    assert es.endpoints([slice_([{"addresses": [], "conditions": {}}])], "grpc") == ()


@pytest.mark.parametrize(
    ("value", "expected"), [(None, 1), ("2", 2), (" 8 ", 8), ("0", 1), ("x", 1), ("99999", 1)]
)
def test_weight_annotation(value: str | None, expected: int) -> None:
    assert es.parse_weight(value, "pod x") == expected


def test_metadata_helpers() -> None:
    s = slice_([])
    s["metadata"]["resourceVersion"] = "42"
    assert es.service_of(s) == "triton"
    assert es.slice_name(s) == "triton-abc"
    assert es.resource_version(s) == "42"
    assert es.service_of({"metadata": {}}) is None
    assert es.resource_version({}) is None
