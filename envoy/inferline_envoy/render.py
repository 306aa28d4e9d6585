"""The Envoy bootstrap from the template: a listener and an EDS cluster per hop, and what the
parameters add to them (REST routing, TLS, shedding, auth, tracing, the probe listener)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from inferline_envoy.params import LOCAL, EnvoyParams, split_names
from inferline_envoy.template import load, substitute

XDS_TLS_NAME = "eds"  # what the control plane's certificate names, under xds_tls
# What tells gRPC from the rest: gRPC's content-type, application/grpc[+proto|+json|...].
GRPC_MATCH = {"name": "content-type", "string_match": {"prefix": "application/grpc"}}
AUTH_PROVIDER = "inferline"  # the template's JWT provider
# Liveness and readiness, by protocol: open to probes and load balancers, which carry no token,
# and never shed, since a busy pipeline is not a dead one. They reveal nothing.
PROBE_PATHS: dict[str, tuple[dict[str, Any], ...]] = {
    "grpc": (
        {"prefix": "/grpc.health.v1.Health/"},
        {"path": "/inference.GRPCInferenceService/ServerLive"},
        {"path": "/inference.GRPCInferenceService/ServerReady"},
        {"path": "/inference.GRPCInferenceService/ModelReady"},
    ),
    "rest": (
        {"prefix": "/v2/health/"},
        {"safe_regex": {"regex": "/v2/models/[^/]+(/versions/[^/]+)?/ready"}},
    ),
}
SHED_FILTER = "envoy.filters.http.admission_control"
FILTER_CONFIG = "type.googleapis.com/envoy.config.route.v3.FilterConfig"  # per route: disabled
_HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
HTTP2_ONLY = {  # a cluster's protocol options: gRPC, HTTP/2 with prior knowledge
    _HTTP_OPTIONS: {
        "@type": f"type.googleapis.com/{_HTTP_OPTIONS}",
        "explicit_http_config": {"http2_protocol_options": {}},
    }
}


def render(params: EnvoyParams = LOCAL, template: Path | None = None) -> dict[str, Any]:
    """The Envoy bootstrap as a dict: one listener and one EDS cluster per hop."""
    shapes = load(template)
    values = params.values()
    config: dict[str, Any] = substitute(shapes["bootstrap"], values)
    listeners, clusters = [], []
    rest = dict(params.rest)
    for name, port in params.listeners:
        hop = {
            **values,
            **answer_ejection(leaf=name in split_names(params.leaf_clusters)),
            "cluster": name,
            "port": port,
            "retry_on": params.retry_on(name),
        }
        listener = substitute(shapes["listener"], hop)
        listeners.append(listener)
        cluster = substitute(shapes["cluster"], hop)
        clusters.append(cluster)
        mtls = name in params.tls_clusters
        if mtls:
            cluster["transport_socket"] = upstream_tls(shapes, values, name, "h2")
        if name in rest:
            route_by_content_type(listener, rest[name])
            rest_cluster = substitute(shapes["rest_cluster"], {**hop, "cluster": rest[name]})
            if mtls:
                rest_cluster["transport_socket"] = upstream_tls(shapes, values, name, "http/1.1")
            clusters.append(rest_cluster)
    if params.xds_tls:
        xds = next(c for c in config["static_resources"]["clusters"] if c["name"] == "xds")
        xds["transport_socket"] = upstream_tls(shapes, values, XDS_TLS_NAME, "h2")
    if params.public_tls_cert:
        shape = shapes["public_tls_sds" if params.sds_dir else "public_tls"]
        listeners[0]["filter_chains"][0]["transport_socket"] = substitute(shape, values)
    public = listeners[0]["filter_chains"][0]["filters"][0]["typed_config"]
    if params.shed:
        public["http_filters"].insert(0, substitute(shapes["public_shed"], values))
        public["local_reply_config"] = substitute(shapes["public_shed_reply"], values)
        unshed_probes(public, params.listeners[0][0], rest.get(params.listeners[0][0]))
    if params.server_timing:
        public["route_config"]["response_headers_to_add"] = substitute(
            shapes["public_timing"], values
        )
    if params.auth_jwks_file:  # first: a request without a good token counts for nothing
        public["http_filters"].insert(0, authentication(shapes, values, params))
    if params.otlp_endpoint:
        clusters.append(
            traced(listeners, shapes, values, params.otlp_protocol, params.export_headers)
        )
    if params.probe_port:
        listeners.append(substitute(shapes["probe_listener"], values))
        clusters.append(substitute(shapes["probe_cluster"], values))
    static = config.setdefault("static_resources", {})
    static["listeners"] = listeners
    static["clusters"] = [*static.get("clusters", []), *clusters]
    return config


def traced(
    listeners: Sequence[dict[str, Any]],
    shapes: Mapping[str, Any],
    values: Mapping[str, Any],
    protocol: str,
    headers: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """Tracing on every listener's connection manager, reporting over OTLP ``protocol`` with
    ``headers`` on every export; the collector's cluster, for the bootstrap to add."""
    service = "tracing_grpc_service" if protocol == "grpc" else "tracing_http_service"
    for listener in listeners:
        manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
        tracing = substitute(shapes["tracing"], values)
        reaching = substitute(shapes[service], values)
        if headers and protocol == "grpc":
            reaching["initial_metadata"] = [{"key": k, "value": v} for k, v in headers]
        elif headers:
            reaching["request_headers_to_add"] = [
                {"header": {"key": k, "value": v}} for k, v in headers
            ]
        tracing["provider"]["typed_config"][service[len("tracing_") :]] = reaching
        manager["tracing"] = tracing
    cluster: dict[str, Any] = substitute(shapes["otlp_cluster"], values)
    if protocol == "grpc":
        cluster["typed_extension_protocol_options"] = HTTP2_ONLY
    return cluster


def authentication(
    shapes: Mapping[str, Any], values: Mapping[str, Any], params: EnvoyParams
) -> dict[str, Any]:
    """The public listener's JWT filter: its provider checks the issuer and audiences that
    ``params`` name (none named: not checked)."""
    jwt: dict[str, Any] = substitute(shapes["public_auth"], values)
    open_paths = [{"match": m} for matches in PROBE_PATHS.values() for m in matches]
    jwt["typed_config"]["rules"][:0] = open_paths
    provider = jwt["typed_config"]["providers"][AUTH_PROVIDER]
    if params.auth_issuer:
        provider["issuer"] = params.auth_issuer
    if audiences := split_names(params.auth_audiences):
        provider["audiences"] = list(audiences)
    return jwt


def upstream_tls(
    shapes: Mapping[str, Any], values: Mapping[str, Any], service: str, alpn: str
) -> dict[str, Any]:
    """The mTLS transport socket to ``service``'s replicas, speaking ``alpn`` (its certificate
    and CA from watched SDS files when ``values`` name an sds_dir)."""
    shape = shapes["upstream_tls_sds" if values["sds_dir"] else "upstream_tls"]
    socket: dict[str, Any] = substitute(shape, {**values, "upstream_name": service, "alpn": alpn})
    return socket


def answer_ejection(leaf: bool) -> dict[str, int]:
    """The template's outlier detection on a replica's answers (gRPC statuses as HTTP:
    UNAVAILABLE 503, DEADLINE_EXCEEDED 504, INTERNAL 500), enforced only where the answer is the
    replica's own. A leaf that answers UNAVAILABLE twice running is broken (a GPU pod whose
    Triton died): ejected before a request's retries run out, since LEAST_REQUEST keeps picking
    the replica that fails fastest. A hop that calls further down answers what came from below:
    a failing pool must not get its healthy middlemen or batchers ejected. Connection failures
    (local origin) eject on every hop, in the template itself."""
    return (
        {"gateway_failures": 2, "enforcing_answers": 100}
        if leaf
        else {
            "gateway_failures": 5,
            "enforcing_answers": 0,
        }
    )


def unshed_probes(manager: dict[str, Any], cluster: str, rest_cluster: str | None) -> None:
    """Routes of their own for the probe paths, first, to the same replicas, with shedding off:
    gRPC's to ``cluster``, REST's to ``rest_cluster`` (none: the hop speaks no REST)."""
    host = manager["route_config"]["virtual_hosts"][0]
    template = host["routes"][-1]
    targets = {"grpc": cluster, "rest": rest_cluster}
    off = {SHED_FILTER: {"@type": FILTER_CONFIG, "disabled": True}}
    probes = [
        {**copy.deepcopy(template), "match": dict(match),
         "route": {**copy.deepcopy(template["route"]), "cluster": target},
         "typed_per_filter_config": off}
        for protocol, target in targets.items() if target
        for match in PROBE_PATHS[protocol]
    ]  # fmt: skip
    host["routes"][:0] = probes


def route_by_content_type(listener: dict[str, Any], rest_cluster: str) -> None:
    """gRPC (by its content-type) to the listener's cluster as before; anything else (HTTP/1.1
    or HTTP/2 REST, curl, a browser) to ``rest_cluster``, with the same route settings."""
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    host = manager["route_config"]["virtual_hosts"][0]
    [route] = host["routes"]
    grpc_route, rest_route = copy.deepcopy(route), copy.deepcopy(route)
    grpc_route["match"]["headers"] = [GRPC_MATCH]
    rest_route["route"]["cluster"] = rest_cluster
    host["routes"] = [grpc_route, rest_route]
