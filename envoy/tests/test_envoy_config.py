"""The Envoy template, rendered for each profile and checked by the real binary."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferline_envoy import config as ec
from inferline_stack import auth, certs


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


@pytest.mark.parametrize("profile", ["local", "kubernetes"])
@pytest.mark.parametrize("xds_api", ["GRPC", "DELTA_GRPC"])
def test_every_rendered_config_passes_envoy_validate(profile: str, xds_api: str) -> None:
    params = dataclasses.replace(ec.PROFILES[profile], xds_api=xds_api)
    ok, output = ec.validate(ec.render(params))
    assert ok, output


def test_the_local_config_has_four_hops_over_ads() -> None:
    config = ec.render(ec.LOCAL)
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
    assert retry["retry_on"] == ec.RETRY_ON_LEAF and retry["num_retries"] == 3
    assert config["admin"]["address"]["socket_address"] == {
        "address": "127.0.0.1",
        "port_value": 9901,
    }
    assert config["dynamic_resources"]["ads_config"]["api_type"] == "GRPC"
    assert clusters["xds"]["type"] == "STATIC"


def test_the_public_listener_routes_grpc_to_middleman_and_the_rest_to_its_rest_port() -> None:
    config = ec.render(ec.LOCAL)
    listeners = by_name(config["static_resources"]["listeners"])
    manager = listeners["middleman"]["filter_chains"][0]["filters"][0]["typed_config"]
    *probes, grpc_route, rest_route = manager["route_config"]["virtual_hosts"][0]["routes"]
    # First, liveness and readiness to the same replicas, with shedding off.
    expected = [(m, "middleman") for m in ec.PROBE_PATHS["grpc"]]
    expected += [(m, "middleman-rest") for m in ec.PROBE_PATHS["rest"]]
    assert [(r["match"], r["route"]["cluster"]) for r in probes] == expected
    for route in probes:
        assert route["typed_per_filter_config"][ec.SHED_FILTER]["disabled"] is True
        assert route["route"]["retry_policy"] == rest_route["route"]["retry_policy"]
    assert grpc_route["match"]["headers"] == [ec.GRPC_MATCH]
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


def test_tls_serves_the_public_listener_and_mtls_reaches_the_named_hops(tmp_path: Path) -> None:
    made = certs.ensure(tmp_path)
    client = (str(made.cert(certs.CLIENT)), str(made.key(certs.CLIENT)))
    params = dataclasses.replace(
        ec.LOCAL,
        public_tls_cert=str(made.cert(certs.PUBLIC)),
        public_tls_key=str(made.key(certs.PUBLIC)),
        upstream_tls_clusters="middleman,preprocess",
        upstream_tls_cert=client[0],
        upstream_tls_key=client[1],
        upstream_tls_ca=str(made.ca),
    )
    config = ec.render(params)
    ok, output = ec.validate(config)  # the real binary loads every certificate
    assert ok, output
    listeners = by_name(config["static_resources"]["listeners"])
    public = listeners["middleman"]["filter_chains"][0]["transport_socket"]["typed_config"]
    assert public["common_tls_context"]["alpn_protocols"] == ["h2", "http/1.1"]
    for inner in ("preprocess", "batcher", "triton"):  # loopback hops: plaintext
        assert "transport_socket" not in listeners[inner]["filter_chains"][0]
    clusters = by_name(config["static_resources"]["clusters"])
    expected = {"middleman": ("h2", "middleman"), "middleman-rest": ("http/1.1", "middleman"),
                "preprocess": ("h2", "preprocess")}  # fmt: skip
    for name, (alpn, san) in expected.items():
        context = clusters[name]["transport_socket"]["typed_config"]["common_tls_context"]
        assert context["alpn_protocols"] == [alpn]
        certificate = context["tls_certificates"][0]
        assert certificate["certificate_chain"]["filename"] == client[0]
        validation = context["validation_context"]
        assert validation["trusted_ca"]["filename"] == str(made.ca)
        assert validation["match_typed_subject_alt_names"][0]["matcher"] == {"exact": san}
    for plain in ("batcher", "triton", "xds"):
        assert "transport_socket" not in clusters[plain]
    assert "transport_socket" not in str(ec.render(ec.LOCAL))  # off unless given


def test_the_xds_stream_may_be_mtls_too(tmp_path: Path) -> None:
    made = certs.ensure(tmp_path)
    params = dataclasses.replace(
        ec.KUBERNETES,
        upstream_tls_cert=str(made.cert(certs.CLIENT)),
        upstream_tls_key=str(made.key(certs.CLIENT)),
        upstream_tls_ca=str(made.ca),
        xds_tls=True,
    )
    config = ec.render(params)
    ok, output = ec.validate(config)
    assert ok, output
    clusters = by_name(config["static_resources"]["clusters"])
    context = clusters["xds"]["transport_socket"]["typed_config"]["common_tls_context"]
    assert context["alpn_protocols"] == ["h2"]
    assert context["tls_certificates"][0]["private_key"]["filename"] == params.upstream_tls_key
    validation = context["validation_context"]
    assert validation["match_typed_subject_alt_names"][0]["matcher"] == {"exact": "eds"}
    assert not any("transport_socket" in c for n, c in clusters.items() if n != "xds")


def test_certificates_may_come_from_watched_sds_files(tmp_path: Path) -> None:
    """With sds_dir, the renderer writes an SDS file per certificate beside the bootstrap (the
    public one; the upstream client certificate and CA), each watched through its directory."""
    made = certs.ensure(tmp_path / "certs")
    sds_dir, out = tmp_path / "sds", tmp_path / "envoy.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "inferline_envoy.config", "--kubernetes", "--validate",
         "--public-tls-cert", str(made.cert(certs.PUBLIC)),
         "--public-tls-key", str(made.key(certs.PUBLIC)),
         "--upstream-tls-clusters", "middleman", "--xds-tls",
         "--upstream-tls-cert", str(made.cert(certs.CLIENT)),
         "--upstream-tls-key", str(made.key(certs.CLIENT)),
         "--upstream-tls-ca", str(made.ca), "--sds-dir", str(sds_dir), "-o", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr  # the real Envoy loaded every file
    config = yaml.safe_load(out.read_text())
    assert sorted(p.name for p in sds_dir.iterdir()) == [
        "public.sds.yaml", "upstream-ca.sds.yaml", "upstream.sds.yaml"
    ]  # fmt: skip
    watched = {"path": str(made.dir)}

    def secret_file(config_source: dict[str, Any], name: str) -> dict[str, Any]:
        assert config_source["name"] == name
        source = config_source["sds_config"]["path_config_source"]
        assert source == {"path": str(sds_dir / f"{name}.sds.yaml"), "watched_directory": watched}
        [resource] = yaml.safe_load(Path(source["path"]).read_text())["resources"]
        assert resource["name"] == name
        return dict(resource)

    listener = by_name(config["static_resources"]["listeners"])["middleman"]
    context = listener["filter_chains"][0]["transport_socket"]["typed_config"]
    [public] = context["common_tls_context"]["tls_certificate_sds_secret_configs"]
    resource = secret_file(public, "public")
    assert resource["tls_certificate"]["certificate_chain"] == {
        "filename": str(made.cert(certs.PUBLIC))
    }
    assert resource["tls_certificate"]["watched_directory"] == watched
    clusters = by_name(config["static_resources"]["clusters"])
    for name, san in (("middleman", "middleman"), ("middleman-rest", "middleman"), ("xds", "eds")):
        context = clusters[name]["transport_socket"]["typed_config"]["common_tls_context"]
        [client] = context["tls_certificate_sds_secret_configs"]
        resource = secret_file(client, "upstream")
        assert resource["tls_certificate"]["private_key"] == {
            "filename": str(made.key(certs.CLIENT))
        }
        validation = context["combined_validation_context"]
        names = validation["default_validation_context"]["match_typed_subject_alt_names"]
        assert names[0]["matcher"] == {"exact": san}
        resource = secret_file(validation["validation_context_sds_secret_config"], "upstream-ca")
        assert resource["validation_context"] == {
            "trusted_ca": {"filename": str(made.ca)}, "watched_directory": watched
        }  # fmt: skip


def test_kubernetes_differs_only_where_it_must() -> None:
    config = ec.render(ec.KUBERNETES)
    xds = by_name(config["static_resources"]["clusters"])["xds"]
    assert xds["type"] == "STRICT_DNS"
    socket = xds["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert socket["socket_address"]["address"] == "eds"  # its own namespace's, by DNS search
    listener = config["static_resources"]["listeners"][0]
    assert listener["address"]["socket_address"]["address"] == "0.0.0.0"
    assert config["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    local = ec.render(ec.LOCAL)
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


def test_placeholders_keep_types_and_unknown_ones_fail() -> None:
    assert ec.substitute({"a": "${n}", "b": "x${n}y", "c": ["${s}"]}, {"n": 3, "s": "t"}) == {
        "a": 3,
        "b": "x3y",
        "c": ["t"],
    }
    with pytest.raises(KeyError, match="nope"):
        ec.substitute("${nope}", {})


def test_the_template_uses_every_parameter() -> None:
    text = ec.template_text()
    names = list(ec.LOCAL.values())
    assert "health_check_interval" in names and "xds_port" in names  # the loop has work
    for name in names:
        assert "${" + name + "}" in text, name


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"xds_api": "REST"}, "xds_api"),
        ({"listeners": ()}, "at least one"),
        ({"admin_port": 8080}, "must differ"),
        ({"listeners": (("a", 1), ("a", 2))}, "two listeners"),
        ({"admin_port": 0}, "not a TCP port"),
        ({"public_tls_cert": "/a.crt"}, "both public_tls_cert and public_tls_key"),
        ({"upstream_tls_clusters": "middleman"}, "needs upstream_tls_cert"),
        ({"xds_tls": True}, "needs upstream_tls_cert"),
        ({"sds_dir": "/etc/envoy/sds"}, "sds_dir needs a certificate"),
        ({"upstream_tls_clusters": "nope"}, r"no listener has cluster \['nope'\]"),
        ({"auth_issuer": "someone"}, "need auth_jwks_file"),
        ({"otlp_endpoint": "https://collector:4318/v1/traces"}, "must be an http:// URL"),
        ({"otlp_endpoint": "collector:4317"}, "must be an http:// URL"),
        ({"otlp_protocol": "http/json"}, "otlp_protocol must be one of"),
        ({"trace_sampling_percent": 101.0}, "within 0-100"),
        ({"otlp_headers": "x-api-key"}, "otlp_headers: expected key=value"),
    ],
)
def test_bad_parameters_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(ec.LOCAL, **changes)


def test_the_cli_renders_validates_and_overrides(tmp_path: Path) -> None:
    out = tmp_path / "envoy.yaml"
    result = subprocess.run(
        [
            sys.executable, "-m", "inferline_envoy.config", "--kubernetes", "--validate",
            "--xds-address", "eds.example:18001", "--xds-api", "DELTA_GRPC",
            "--listener", "triton=9083", "--admin-port", "9911", "--no-shed", "-o", str(out),
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stderr
    config = yaml.safe_load(out.read_text())
    assert config["dynamic_resources"]["ads_config"]["api_type"] == "DELTA_GRPC"
    assert [li["name"] for li in config["static_resources"]["listeners"]] == ["triton", "probe"]
    assert config["admin"]["address"]["socket_address"]["port_value"] == 9911
    assert "admission_control" not in out.read_text()  # --no-shed (shedding is on by default)


def test_the_cli_explains_a_bad_value() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "inferline_envoy.config", "--local", "--listener", "triton"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 2 and "cluster=port" in result.stderr


def test_only_the_leaf_hops_retry_an_unavailable_answer() -> None:
    """A hop that calls further down passes an UNAVAILABLE up (it was retried below)."""
    listeners = by_name(ec.render(ec.LOCAL)["static_resources"]["listeners"])
    retry_on = {}
    for name, listener in listeners.items():
        host = listener["filter_chains"][0]["filters"][0]["typed_config"]["route_config"]
        for route in host["virtual_hosts"][0]["routes"]:
            retry_on[name] = route["route"]["retry_policy"]["retry_on"]
    assert retry_on == {
        "middleman": ec.RETRY_ON_HOP,
        "batcher": ec.RETRY_ON_HOP,
        "preprocess": ec.RETRY_ON_LEAF,
        "triton": ec.RETRY_ON_LEAF,
    }
    assert "unavailable" not in ec.RETRY_ON_HOP


def test_only_a_leaf_is_ejected_for_its_answers_every_hop_for_lost_connections() -> None:
    """A middleman answering UNAVAILABLE passes up a failing pool: it must stay in rotation."""
    clusters = by_name(ec.render(ec.LOCAL)["static_resources"]["clusters"])
    for name in ("middleman", "middleman-rest", "batcher", "preprocess", "triton"):
        outlier = clusters[name]["outlier_detection"]
        leaf = name in ("preprocess", "triton")
        assert outlier["enforcing_consecutive_local_origin_failure"] == 100
        assert outlier.get("enforcing_consecutive_gateway_failure") == (100 if leaf else 0)
        assert outlier.get("enforcing_consecutive_5xx", 100) == (100 if leaf else 0)
        assert outlier["consecutive_gateway_failure"] == (2 if leaf else 5)  # a leaf: twice


def test_auth_checks_tokens_on_the_public_listener_only_and_leaves_probes_open(
    tmp_path: Path,
) -> None:
    files = auth.ensure(tmp_path)
    params = dataclasses.replace(
        ec.LOCAL, auth_jwks_file=str(files.jwks), auth_issuer="iss", auth_audiences="a, b"
    )
    config = ec.render(params)
    ok, output = ec.validate(config)  # the real binary loads the key set
    assert ok, output
    listeners = by_name(config["static_resources"]["listeners"])

    def filters(name: str) -> list[dict[str, Any]]:
        manager = listeners[name]["filter_chains"][0]["filters"][0]["typed_config"]
        names: list[dict[str, Any]] = manager["http_filters"]
        return names

    jwt = filters("middleman")[0]
    assert jwt["name"] == "envoy.filters.http.jwt_authn"  # before the router
    for hop in ("preprocess", "batcher", "triton"):  # inside, behind Envoy: no tokens
        assert [f["name"] for f in filters(hop)] == ["envoy.filters.http.router"]
    provider = jwt["typed_config"]["providers"][ec.AUTH_PROVIDER]
    assert provider["issuer"] == "iss" and provider["audiences"] == ["a", "b"]
    assert provider["local_jwks"] == {"filename": str(files.jwks)}
    rules = jwt["typed_config"]["rules"]
    open_paths = [r["match"] for r in rules if "requires" not in r]
    assert {"prefix": "/grpc.health.v1.Health/"} in open_paths
    assert {"path": "/inference.GRPCInferenceService/ModelReady"} in open_paths
    assert rules[-1] == {"match": {"prefix": "/"}, "requires": {"provider_name": "inferline"}}


def public_manager(params: ec.EnvoyParams) -> dict[str, Any]:
    listener = ec.render(params)["static_resources"]["listeners"][0]
    manager: dict[str, Any] = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return manager


def test_the_public_listener_sheds_after_the_token_check_and_before_the_router(
    tmp_path: Path,
) -> None:
    jwks = str(auth.ensure(tmp_path).jwks)
    with_auth = public_manager(dataclasses.replace(ec.LOCAL, auth_jwks_file=jwks))
    assert [f["name"] for f in with_auth["http_filters"]] == [
        "envoy.filters.http.jwt_authn",  # a request without a good token counts for nothing
        "envoy.filters.http.admission_control",
        "envoy.filters.http.router",
    ]
    manager = public_manager(ec.LOCAL)
    [shed, _] = manager["http_filters"]
    criteria = shed["typed_config"]["success_criteria"]
    assert 8 not in criteria["grpc_criteria"]["grpc_success_status"]  # only "saturated" fails
    assert len(criteria["grpc_criteria"]["grpc_success_status"]) == 16
    ranges = criteria["http_criteria"]["http_success_status"]
    assert [range(r["start"], r["end"]) for r in ranges if 429 in range(r["start"], r["end"])] == []
    grpc_reply, rest_reply = manager["local_reply_config"]["mappers"]
    headers = {h["header"]["key"]: h["header"]["value"] for h in grpc_reply["headers_to_add"]}
    assert headers == {"grpc-status": "8", "grpc-message": ec.SHED_MESSAGE}
    assert rest_reply["status_code"] == 429
    assert rest_reply["body_format_override"]["json_format"] == {"error": ec.SHED_MESSAGE}
    hops = ec.render(ec.LOCAL)["static_resources"]["listeners"][1:]
    for hop in hops:  # the inner hops never shed: middleman's admission decided already
        inner = hop["filter_chains"][0]["filters"][0]["typed_config"]
        assert [f["name"] for f in inner["http_filters"]] == ["envoy.filters.http.router"]


def test_without_shedding_or_auth_the_public_listener_only_routes() -> None:
    manager = public_manager(dataclasses.replace(ec.LOCAL, shed=False))
    assert [f["name"] for f in manager["http_filters"]] == ["envoy.filters.http.router"]
    assert "local_reply_config" not in manager


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
        ec.KUBERNETES, otlp_endpoint=endpoint, otlp_protocol=protocol, trace_sampling_percent=2.5
    )
    config = ec.render(params)
    ok, output = ec.validate(config)
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
    config = ec.render(ec.LOCAL)
    assert "tracing" not in str(config) and "otlp" not in by_name(
        config["static_resources"]["clusters"]
    )


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_every_export_carries_the_headers_the_environment_gives(protocol: str) -> None:
    # OTEL_EXPORTER_OTLP_HEADERS' form: a backend's key, or the project spans are filed under.
    params = dataclasses.replace(
        ec.LOCAL,
        otlp_endpoint="http://127.0.0.1:4318/v1/traces",
        otlp_protocol=protocol,
        otlp_headers="x-mlflow-experiment-id=0, Authorization=Bearer%20a%3Db",
    )
    config = ec.render(params)
    ok, output = ec.validate(config)
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
