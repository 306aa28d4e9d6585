"""The Envoy bootstrap's parameters: everything the template leaves open, and its two profiles.

:data:`LOCAL` is the local stack's, :data:`KUBERNETES` the cluster's; they differ only where
they must (where the control plane is, which address to listen on, health-check pace).
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

XDS_APIS = ("GRPC", "DELTA_GRPC")
DEFAULT_LISTENERS = (("middleman", 8080), ("preprocess", 8081), ("batcher", 8082), ("triton", 8083))
# Hops whose listener also takes HTTP/REST, and the cluster of their REST port.
DEFAULT_REST = (("middleman", "middleman-rest"),)
# Retries happen at the hop that failed, and only there. Every hop retries its own replica's
# failures (a reset, a refused connection or stream: the replica went away) on another. Only a
# hop whose replicas answer from themselves (a leaf: the GPU pool, the remote decoders) also
# retries an UNAVAILABLE its replica answered; any other hop's UNAVAILABLE came from below and
# was retried there already, so it passes up as it is (retrying it would multiply the attempts
# at the pool by every layer's retries).
RETRY_ON_HOP = "reset,connect-failure,refused-stream"
RETRY_ON_LEAF = "unavailable," + RETRY_ON_HOP
SHED_MESSAGE = (
    "overloaded: the pipeline's front door (Envoy) refuses a share of requests while middleman "
    "says it is saturated; retry after a backoff, or add replicas"
)
OTLP_PROTOCOLS = ("http/protobuf", "grpc")  # as OTEL_EXPORTER_OTLP_PROTOCOL names them


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
    # Retries per request at one hop, each on another replica where one is free (inferline.
    # capacity's HOP_RETRIES says why five): right after a kill -9 LEAST_REQUEST (FULL_SCAN)
    # picks the emptiest replica, the dead one, until outlier detection ejects it 20-100 ms later.
    # What bounds the attempts is the budget: retries in flight at most this share of the
    # requests in flight, so a failing pool gets about a fifth more attempts, not a multiple;
    # at least min_retry_concurrency, so that the burst a kill -9 resets at once (every request
    # in flight on the lost replica) is retried whole.
    num_retries: int = 5
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
