"""The Envoy template, rendered for each profile: a listener and a cluster per hop, routes,
retries and ejection, and what Kubernetes changes; every variant checked by the real binary."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from inferline_envoy.binary import validate
from inferline_envoy.params import KUBERNETES, LOCAL, PROFILES, RETRY_ON_HOP, RETRY_ON_LEAF
from inferline_envoy.render import GRPC_MATCH, PROBE_PATHS, SHED_FILTER, render


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


@pytest.mark.parametrize("profile", ["local", "kubernetes"])
@pytest.mark.parametrize("xds_api", ["GRPC", "DELTA_GRPC"])
def test_every_rendered_config_passes_envoy_validate(profile: str, xds_api: str) -> None:
    params = dataclasses.replace(PROFILES[profile], xds_api=xds_api)
    ok, output = validate(render(params))
    assert ok, output


def test_the_local_config_has_four_hops_over_ads() -> None:
    config = render(LOCAL)
    listeners = by_name(config["static_resources"]["listeners"])
    assert {n: li["address"]["socket_address"]["port_value"] for n, li in listeners.items()} == {
        "middleman": 8080,
        "preprocess": 8081,
        "batcher": 8082,
        "triton": 8083,
    }
    clusters = by_name(config["static_resources"]["clusters"])
    assert set(clusters) == {
        "xds",
        "middleman",
        "middleman-rest",
        "preprocess",
        "batcher",
        "triton",
    }
    triton = clusters["triton"]
    assert triton["type"] == "EDS"
    (policy,) = triton["load_balancing_policy"]["policies"]
    assert policy["typed_extension_config"]["name"] == "envoy.load_balancing_policies.least_request"
    assert policy["typed_extension_config"]["typed_config"]["selection_method"] == "FULL_SCAN"
    assert triton["eds_cluster_config"]["eds_config"]["ads"] == {}
    assert "http2_protocol_options" in str(triton["typed_extension_protocol_options"])
    assert triton["health_checks"][0]["grpc_health_check"] == {}
    # A refused connection ejects the replica before the request's retry picks a host.
    assert triton["outlier_detection"]["consecutive_local_origin_failure"] == 1
    limits = triton["circuit_breakers"]["thresholds"][0]
    assert limits["max_pending_requests"] > 1024
    budget = {"budget_percent": {"value": 20.0}, "min_retry_concurrency": 16}
    assert limits["retry_budget"] == budget
    route = listeners["triton"]["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]
    retry = route["virtual_hosts"][0]["routes"][0]["route"]["retry_policy"]
    assert retry["retry_on"] == RETRY_ON_LEAF and retry["num_retries"] == 5
    assert config["admin"]["address"]["socket_address"] == {
        "address": "127.0.0.1",
        "port_value": 9901,
    }
    assert config["dynamic_resources"]["ads_config"]["api_type"] == "GRPC"
    assert clusters["xds"]["type"] == "STATIC"


def test_the_public_listener_routes_grpc_to_middleman_and_the_rest_to_its_rest_port() -> None:
    config = render(LOCAL)
    listeners = by_name(config["static_resources"]["listeners"])
    manager = listeners["middleman"]["filter_chains"][0]["filters"][0]["typed_config"]
    *probes, grpc_route, rest_route = manager["route_config"]["virtual_hosts"][0]["routes"]
    # First, liveness and readiness to the same replicas, with shedding off.
    expected = [(m, "middleman") for m in PROBE_PATHS["grpc"]]
    expected += [(m, "middleman-rest") for m in PROBE_PATHS["rest"]]
    assert [(r["match"], r["route"]["cluster"]) for r in probes] == expected
    for route in probes:
        assert route["typed_per_filter_config"][SHED_FILTER]["disabled"] is True
        assert route["route"]["retry_policy"] == rest_route["route"]["retry_policy"]
    assert grpc_route["match"]["headers"] == [GRPC_MATCH]
    assert (grpc_route["route"]["cluster"], rest_route["route"]["cluster"]) == (
        "middleman", "middleman-rest",
    )  # fmt: skip
    assert rest_route["match"] == {"prefix": "/"}  # everything that is not gRPC
    assert rest_route["route"]["retry_policy"] == grpc_route["route"]["retry_policy"]
    clusters = by_name(config["static_resources"]["clusters"])
    rest = clusters["middleman-rest"]
    assert rest["eds_cluster_config"]["service_name"] == "middleman-rest"
    assert "http_protocol_options" in str(rest["typed_extension_protocol_options"])
    assert rest["health_checks"][0]["http_health_check"] == {"path": "/v2/health/live"}
    assert rest["outlier_detection"] == clusters["middleman"]["outlier_detection"]
    for hop in ("preprocess", "batcher", "triton"):  # inner hops: gRPC only
        manager = listeners[hop]["filter_chains"][0]["filters"][0]["typed_config"]
        assert len(manager["route_config"]["virtual_hosts"][0]["routes"]) == 1


def test_kubernetes_differs_only_where_it_must() -> None:
    config = render(KUBERNETES)
    xds = by_name(config["static_resources"]["clusters"])["xds"]
    assert xds["type"] == "STRICT_DNS"
    socket = xds["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert socket["socket_address"]["address"] == "eds"  # its own namespace's, by DNS search
    listener = config["static_resources"]["listeners"][0]
    assert listener["address"]["socket_address"]["address"] == "0.0.0.0"
    assert config["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    local = render(LOCAL)
    assert local["static_resources"]["clusters"][1:] != config["static_resources"]["clusters"][1:]
    assert {c["name"] for c in local["static_resources"]["clusters"]} | {"admin"} == {
        c["name"] for c in config["static_resources"]["clusters"]
    }  # Kubernetes adds the probe listener's way to the admin API
    probe = by_name(config["static_resources"]["listeners"])["probe"]
    assert probe["address"]["socket_address"]["port_value"] == 9902
    manager = probe["filter_chains"][0]["filters"][0]["typed_config"]
    routes = manager["route_config"]["virtual_hosts"][0]["routes"]
    exposed = [r["match"]["path"] for r in routes if r.get("route", {}).get("cluster") == "admin"]
    assert exposed == ["/ready", "/stats/prometheus"]  # nothing else of the admin API
    assert routes[-1] == {"match": {"prefix": "/"}, "direct_response": {"status": 404}}
    assert "probe" not in {li["name"] for li in local["static_resources"]["listeners"]}


def test_only_the_leaf_hops_retry_an_unavailable_answer() -> None:
    """A hop that calls further down passes an UNAVAILABLE up (it was retried below)."""
    listeners = by_name(render(LOCAL)["static_resources"]["listeners"])
    retry_on = {}
    for name, listener in listeners.items():
        host = listener["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]
        for route in host["virtual_hosts"][0]["routes"]:
            retry_on[name] = route["route"]["retry_policy"]["retry_on"]
    assert retry_on == {
        "middleman": RETRY_ON_HOP,
        "batcher": RETRY_ON_HOP,
        "preprocess": RETRY_ON_LEAF,
        "triton": RETRY_ON_LEAF,
    }
    assert "unavailable" not in RETRY_ON_HOP


def test_only_a_leaf_is_ejected_for_its_answers_every_hop_for_lost_connections() -> None:
    """A middleman answering UNAVAILABLE passes up a failing pool: it must stay in rotation."""
    clusters = by_name(render(LOCAL)["static_resources"]["clusters"])
    for name in ("middleman", "middleman-rest", "batcher", "preprocess", "triton"):
        outlier = clusters[name]["outlier_detection"]
        leaf = name in ("preprocess", "triton")
        assert outlier["enforcing_consecutive_local_origin_failure"] == 100
        assert outlier.get("enforcing_consecutive_gateway_failure") == (100 if leaf else 0)
        assert outlier.get("enforcing_consecutive_5xx", 100) == (100 if leaf else 0)
        assert outlier["consecutive_gateway_failure"] == (2 if leaf else 5)  # a leaf: twice
