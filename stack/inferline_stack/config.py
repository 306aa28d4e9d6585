"""Local stack configuration: ``INFERLINE_STACK_*`` environment variables or flags.

Every hop goes through Envoy: the public endpoint is Envoy's listener ``public_port`` (8080),
which balances over the middleman replicas; middleman calls preprocess and the batcher (or
Triton) through Envoy's listeners 8081-8083. The services' own ports (8090-8092, Triton's
8001) are where Envoy reaches replica 0; replica ``i`` of a service uses its base ports plus
``REPLICA_STEP[service] * i``.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from pathlib import Path

from inferline import catalog
from inferline.config import env_name, environment, require

PREFIX = "INFERLINE_STACK"

TRITON, BATCHER, PREPROCESS, MIDDLEMAN = "triton", "batcher", "preprocess", "middleman"
# Start order (each tier is announced to Envoy before the tier in front of it starts).
SERVICES = (TRITON, BATCHER, PREPROCESS, MIDDLEMAN)
# Envoy's clusters: one per service, and middleman's REST port (KServe v2 HTTP/REST) beside it.
MIDDLEMAN_REST = "middleman-rest"
# What an inner hop may dial proxyless: middleman, the batchers. The public front door stays
# Envoy's, and so do the leaf hops (the GPU pods, the remote decoders), measured
# (docs/performance.md, Dialling the inner hops): Envoy's least-request balancing gives a GPU
# pod of half the speed its share where gRPC's round robin halves the traffic, and Envoy's
# retries never meet the same broken replica again where round robin's did.
PROXYLESS_CLUSTERS = (BATCHER,)
AUTO = "auto"  # StackConfig.proxyless: PROXYLESS_CLUSTERS, or none with TLS
CLUSTERS = (*SERVICES, MIDDLEMAN_REST)
# Replica i listens on base + step * i. Triton's 8001 + 10 * 8 would reach Envoy's 8081.
REPLICA_STEP = {TRITON: 10, BATCHER: 100, PREPROCESS: 100, MIDDLEMAN: 100}
MAX_REPLICAS = 8
# Where images are decoded (docs/architecture.md, Placements): beside each Triton (its GPU
# pod), at the preprocess service pool, or in middleman.
IN_POD, REMOTE, IN_PROCESS = "in-pod", "remote", "in-process"
PLACEMENTS = (IN_POD, REMOTE, IN_PROCESS)
EVERY = "*"  # StackConfig.models: every classifier in the model repository

# Every TCP port field; each must differ from the others.
PORT_FIELDS = (
    "public_port", "preprocess_listener_port", "batcher_listener_port", "triton_listener_port",
    "envoy_admin_port", "middleman_port", "middleman_metrics_port", "middleman_rest_port",
    "preprocess_port", "preprocess_metrics_port", "batcher_port", "batcher_metrics_port",
    "triton_grpc_port", "triton_http_port", "triton_metrics_port", "pod_port", "pod_metrics_port",
    "eds_port", "eds_metrics_port", "prometheus_port", "trace_view_port",
)  # fmt: skip
# Which base ports each service's replicas step from (the others are fixed, one process each).
REPLICA_PORT_FIELDS = {
    TRITON: (
        "triton_grpc_port",
        "triton_http_port",
        "triton_metrics_port",
        "pod_port",
        "pod_metrics_port",
    ),
    BATCHER: ("batcher_port", "batcher_metrics_port"),
    PREPROCESS: ("preprocess_port", "preprocess_metrics_port"),
    MIDDLEMAN: ("middleman_port", "middleman_metrics_port", "middleman_rest_port"),
}


@dataclass(frozen=True)
class StackConfig:
    # The run folder: pids, logs/, endpoints.yaml, envoy.yaml.
    run_dir: str = ".run"
    # The model repository / Triton's default model, served as `classifier`: efficientnet_lite0
    # (the real one) or simulated_gpu (a simulated GPU for scale-out on machines without GPUs;
    # its answers are not a real classification).
    model_repository: str = "build/model_repository"
    model: str = "efficientnet_lite0"
    # Models served beside it, each under its own name: "*" every classifier in the model
    # repository (none beside the simulated GPU), or a comma-separated list ("" none); Triton
    # serves them and middleman answers for each by name.
    models: str = "*"
    # More flags for every Triton replica (``python -m inferline_models.triton --help``), e.g.
    # "--simulated-t0-ms 40" for a slower simulated GPU.
    triton_args: str = ""
    # Envoy: the public endpoint (to middleman) and one listener per hop behind it: preprocess,
    # batcher, Triton.
    public_port: int = 8080
    preprocess_listener_port: int = 8081
    batcher_listener_port: int = 8082
    triton_listener_port: int = 8083
    envoy_admin_port: int = 9901  # Envoy's admin: /clusters, /stats/prometheus, /ready
    # Envoy's worker threads (its --concurrency); 0: a quarter of the cores, at least one.
    envoy_workers: int = 0
    # The services themselves (replica 0), where Envoy sends what it balances; replica i of
    # middleman, preprocess or the batcher uses these + 100 i. middleman: gRPC, /metrics, and
    # KServe v2 HTTP/REST (behind Envoy's public listener too).
    middleman_port: int = 8090
    middleman_metrics_port: int = 9180
    middleman_rest_port: int = 8093
    # preprocess (the remote placement's pool): gRPC, /metrics.
    preprocess_port: int = 8091
    preprocess_metrics_port: int = 9181
    # The batcher: gRPC, /metrics.
    batcher_port: int = 8092
    batcher_metrics_port: int = 9182
    # Triton replica 0: gRPC, HTTP, /metrics; replica i uses these + 10 i (at most 8 replicas).
    triton_grpc_port: int = 8001
    triton_http_port: int = 8000
    triton_metrics_port: int = 8002
    # In-pod: the preprocess beside Triton replica 0 (the pod's front door, where Envoy sends a
    # replica's batches), and its /metrics; replica i uses these + 10 i.
    pod_port: int = 8003
    pod_metrics_port: int = 8004
    # The control plane: xDS for Envoy (ADS, and proxyless gRPC), its /metrics.
    eds_port: int = 18000
    eds_metrics_port: int = 9183
    # Where images are decoded: "in-pod" (a preprocess beside each Triton replica, fed encoded
    # batches by the batcher, tensors to Triton in shared memory; make scale starts and drains
    # them together), "remote" (the preprocess service's own pool) or "in-process" (middleman
    # decodes).
    placement: str = IN_POD
    # True: middleman -> Envoy -> batcher -> Envoy -> Triton. False: middleman -> Envoy -> Triton.
    batcher: bool = True
    # The clusters an inner hop dials with gRPC's own xDS client (xds:///<cluster>, fed by the
    # control plane) instead of through Envoy: "batcher" (middleman balances over the batchers
    # itself: one Envoy traversal less per request, measured in docs/performance.md), "" (every
    # hop through Envoy), or "auto": "batcher", and "" with tls (a proxyless client presents no
    # certificate, so mTLS between the services stays Envoy's).
    proxyless: str = AUTO
    # Prometheus scraping every process, when the `prometheus` binary is installed (Debian's
    # package); the stack runs without it all the same. Its data lives under run_dir. Its port,
    # its configuration, its scrape interval.
    prometheus: bool = True
    prometheus_port: int = 9090
    prometheus_config: str = "grafana/prometheus/prometheus.yml"
    scrape_interval_s: float = 5.0
    # Tracing (docs/tracing.md): every process traced, Envoy and Triton included, parent-based
    # at the sampling ratio of OTEL_TRACES_SAMPLER[_ARG] (1 %: a client's sampled traceparent is
    # traced always). Spans go to the OTLP endpoint of up's environment when it names one
    # (OTEL_EXPORTER_OTLP_ENDPOINT), else to MLflow's trace view, which the stack runs on
    # trace_view_port: `mlflow` is its binary (`make mlflow` installs it), its data under run_dir.
    tracing: bool = False
    trace_view_port: int = 5000
    mlflow: str = ".venv-mlflow/bin/mlflow"
    # TLS: Envoy's public listener serves TLS, and Envoy reaches middleman, preprocess, the
    # batcher and Triton over mTLS (their own ports require its client certificate;
    # docs/reliability.md), so middleman dials the batchers through Envoy then (proxyless "auto").
    # The services' calls to Envoy's loopback listeners stay plaintext.
    tls: bool = False
    # The certificates ("": run_dir/certs), made by `make certs` (inferline_stack.certs); `up`
    # makes any missing.
    certs_dir: str = ""
    # Shedding at the public endpoint: Envoy refuses a share of new requests itself while
    # middleman says it is saturated (docs/reliability.md); false leaves every refusal to middleman.
    shed: bool = True
    # Authentication at the public endpoint: Envoy admits only requests with a token signed by
    # the stack's key (JWT, `make token` writes the key and a token under run_dir/auth; `up`
    # makes them when missing); health and readiness stay open. The demo client's --token.
    auth: bool = False
    # Seconds a process has to become ready / to stop gracefully before it is killed.
    start_timeout_s: float = 180.0
    stop_grace_s: float = 20.0

    def __post_init__(self) -> None:
        for name in PORT_FIELDS:
            require(0 < getattr(self, name) < 65536, PREFIX, name, "must be a TCP port")
        owner: dict[int, str] = {}
        for name in PORT_FIELDS:
            port = getattr(self, name)
            other = owner.setdefault(port, name)
            also = f"port {port} is also {env_name(PREFIX, other)}; each port must differ"
            require(other == name, PREFIX, name, also)
        require(
            self.placement in PLACEMENTS,
            PREFIX,
            "placement",
            f"must be one of {', '.join(PLACEMENTS)}",
        )
        require(bool(self.model), PREFIX, "model", "must name a model")
        try:
            shlex.split(self.triton_args)
        except ValueError as exc:
            require(False, PREFIX, "triton_args", f"cannot be split like a shell line: {exc}")
        unknown = set(self.proxyless_clusters) - set(PROXYLESS_CLUSTERS)
        require(
            not unknown,
            PREFIX,
            "proxyless",
            f"names the clusters an inner hop dials proxyless: {', '.join(PROXYLESS_CLUSTERS)}, "
            "or none (the leaf hops stay Envoy's; docs/performance.md says why)",
        )
        require(
            not (self.tls and self.proxyless_clusters),
            PREFIX,
            "tls",
            "mTLS between the services goes through Envoy; a proxyless hop (gRPC's xDS client) "
            "has no client certificate: set proxyless empty, or tls false",
        )
        require(self.envoy_workers >= 0, PREFIX, "envoy_workers", "must be >= 0 (0: automatic)")
        require(self.scrape_interval_s > 0, PREFIX, "scrape_interval_s", "must be positive")
        require(self.start_timeout_s > 0, PREFIX, "start_timeout_s", "must be positive")
        require(self.stop_grace_s >= 0, PREFIX, "stop_grace_s", "must not be negative")

    def served_models(self) -> list[str]:
        """What Triton serves and middleman answers for: the default model first.

        Raises ValueError naming a listed model the repository has no model card for.
        """
        repository = Path(self.model_repository)
        if self.models == EVERY:
            # A default model without a card (the simulated GPU) is served alone.
            carded = (repository / self.model / catalog.CARD_FILE).is_file()
            more = catalog.classifiers(repository) if carded else []
        else:
            more = [name.strip() for name in self.models.split(",") if name.strip()]
            for name in more:
                if not (repository / name / catalog.CARD_FILE).is_file():
                    raise ValueError(
                        f"model {name!r} (INFERLINE_STACK_MODELS) is not in {repository}: "
                        f"`make model MODELS={name}` builds a built-in one, "
                        "`python -m inferline_models add` imports your own"
                    )
        return list(dict.fromkeys([self.model, *more]))

    @property
    def services(self) -> tuple[str, ...]:
        """The pipeline services this configuration runs, in start order."""
        return tuple(
            s
            for s in SERVICES
            if (s != BATCHER or self.batcher) and (s != PREPROCESS or self.placement == REMOTE)
        )

    @property
    def listeners(self) -> tuple[tuple[str, int], ...]:
        """Envoy's listeners: (cluster, port), one per hop."""
        return (
            (MIDDLEMAN, self.public_port),
            (PREPROCESS, self.preprocess_listener_port),
            (BATCHER, self.batcher_listener_port),
            (TRITON, self.triton_listener_port),
        )

    @property
    def certs_path(self) -> Path:
        """Where the TLS certificates are (``make certs`` writes them there)."""
        return Path(self.certs_dir) if self.certs_dir else Path(self.run_dir) / "certs"

    @property
    def auth_path(self) -> Path:
        """Where the signing key, its key set and the demo client's token are."""
        return Path(self.run_dir) / "auth"

    @property
    def admin_url(self) -> str:
        return f"http://127.0.0.1:{self.envoy_admin_port}"

    @property
    def prometheus_url(self) -> str:
        return f"http://127.0.0.1:{self.prometheus_port}"

    @property
    def trace_view_url(self) -> str:
        return f"http://127.0.0.1:{self.trace_view_port}"

    def listener(self, cluster: str) -> str:
        return f"127.0.0.1:{dict(self.listeners)[cluster]}"

    @property
    def proxyless_clusters(self) -> tuple[str, ...]:
        if self.proxyless == AUTO:
            return () if self.tls else PROXYLESS_CLUSTERS
        return tuple(name.strip() for name in self.proxyless.split(",") if name.strip())

    def upstream(self, cluster: str) -> str:
        """How an inner hop dials ``cluster``: Envoy's listener for it, or ``xds:///<cluster>``
        (gRPC's xDS client balances over its replicas) where it is proxyless."""
        return f"xds:///{cluster}" if cluster in self.proxyless_clusters else self.listener(cluster)

    def replica_ports(self, service: str, index: int) -> tuple[int, ...]:
        """The ports of replica ``index`` of ``service`` (gRPC first, then the others)."""
        if not 0 <= index < MAX_REPLICAS:
            raise ValueError(f"{service} replica {index}: at most {MAX_REPLICAS} replicas")
        step = REPLICA_STEP[service] * index
        ports = tuple(getattr(self, name) + step for name in REPLICA_PORT_FIELDS[service])
        if max(ports) > 65535:
            raise ValueError(f"{service} replica {index}: its ports {ports} are not all TCP ports")
        return ports

    def environ(self) -> dict[str, str]:
        """This configuration as ``INFERLINE_STACK_*`` variables (for a ``make`` or CLI child)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return environment(StackConfig, PREFIX, **values)
