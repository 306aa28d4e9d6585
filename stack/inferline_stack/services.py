"""What the local stack runs: the control plane, Envoy, and replicas of each pipeline service.

Processes are named ``eds``, ``envoy`` and ``<service>-<i>`` (``triton-0``, ``triton-1``, …).
Every replica is an endpoint of its Envoy cluster; every call between services goes through
Envoy's listener for that hop (or, proxyless, through gRPC's xDS client).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from batcher import config as batcher_config
from eds import config as eds_config
from eds.cache import Endpoint
from inferline import capacity
from inferline.config import environment
from inferline_envoy import proxyless
from inferline_stack import certs, health, leftovers, traceview
from inferline_stack.config import (
    BATCHER,
    CLUSTERS,
    IN_POD,
    MAX_REPLICAS,
    MIDDLEMAN,
    MIDDLEMAN_REST,
    PREPROCESS,
    REMOTE,
    SERVICES,
    TRITON,
    StackConfig,
)
from inferline_stack.scaling import Member
from middleman import config as middleman_config
from preprocess import config as preprocess_config

EDS, ENVOY = "eds", "envoy"
HOST = "127.0.0.1"  # every process of the local stack listens on loopback only
ZONE = "local"
REPLICA_NAME = re.compile(r"^([a-z]+)-([0-9]+)$")
SHM_PREFIX = "inferline"  # in-pod: the pods' rings (shm_prefix)
XDS_BOOTSTRAP = "xds-bootstrap.json"  # gRPC's xDS bootstrap, for the hops dialled proxyless


@dataclass(frozen=True)
class Service:
    name: str
    argv: list[str]
    address: str  # what its readiness check asks (gRPC host:port, or Envoy's admin URL)
    check: Callable[[], bool]  # ready?
    env: dict[str, str] = field(default_factory=dict)
    metrics: str = ""
    cluster: str = ""  # the Envoy cluster it is an endpoint of ("" for eds and Envoy)
    port: int = 0  # its endpoint's port in that cluster
    inputs: str = ""  # what else defines it (Envoy's rendered configuration)
    # More (cluster, port) it is an endpoint of: middleman's REST port
    also: tuple[tuple[str, int], ...] = ()
    tls: health.ClientTls | None = None  # how its own port is reached (mTLS), None: plaintext
    certs: str = ""  # a digest of the certificates it serves and trusts (TLS on)
    pod_metrics: str = ""  # in-pod: the /metrics of the preprocess beside this Triton

    def fingerprint(self) -> str:
        """Changes whenever what it would be started with changes (``up`` restarts it then)."""
        parts = [self.argv, sorted(self.env.items()), self.inputs]
        text = json.dumps([*parts, self.certs] if self.certs else parts)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def endpoint(self) -> Endpoint:
        return Endpoint(HOST, self.port, zone=ZONE, name=self.name)

    def members(self) -> list[Member]:
        """Every (cluster, endpoint) it is to Envoy: announced and drained together."""
        return [
            (cluster, Endpoint(HOST, port, zone=ZONE, name=self.name))
            for cluster, port in ((self.cluster, self.port), *self.also)
        ]


def python(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def replica_name(service: str, index: int) -> str:
    return f"{service}-{index}"


def parse_replica_name(name: str) -> tuple[str, int] | None:
    """``("triton", 1)`` for ``triton-1``; ``None`` for anything else."""
    match = REPLICA_NAME.match(name)
    if match is None or match.group(1) not in SERVICES:
        return None
    return match.group(1), int(match.group(2))


def run_path(config: StackConfig, name: str) -> Path:
    return Path(config.run_dir) / name


def endpoints_path(config: StackConfig) -> Path:
    return run_path(config, "endpoints.yaml")


# The hops Envoy reaches over mTLS when the stack's TLS is on: every service's own port (gRPC;
# middleman's REST too). Triton's HTTP and metrics ports stay plaintext: only the stack's
# readiness checks and Prometheus use them, on loopback.
MTLS_SERVICES = (MIDDLEMAN, PREPROCESS, BATCHER, TRITON)


def stack_certs(config: StackConfig) -> certs.Certs:
    return certs.Certs(config.certs_path.resolve())


def envoy_client_tls(config: StackConfig) -> health.ClientTls:
    """What reaches a service's own port under mTLS: Envoy's client certificate, the CA."""
    made = stack_certs(config)
    return health.ClientTls(str(made.ca), str(made.cert(certs.CLIENT)), str(made.key(certs.CLIENT)))


def public_tls(config: StackConfig) -> health.ClientTls | None:
    """What a client of the public listener needs: the local CA (None: plaintext)."""
    return health.ClientTls(str(stack_certs(config).ca)) if config.tls else None


# Each service's settings (its Config and the prefix of its variables): what the stack sets.
SETTINGS: dict[str, tuple[type, str]] = {
    BATCHER: (batcher_config.Config, batcher_config.PREFIX),
    EDS: (eds_config.Config, eds_config.PREFIX),
    MIDDLEMAN: (middleman_config.Config, middleman_config.PREFIX),
    PREPROCESS: (preprocess_config.Config, preprocess_config.PREFIX),
}


def settings(service: str, **values: object) -> dict[str, str]:
    """``values`` as ``service``'s environment, checked against its Config (a setting it does
    not have fails here: :func:`inferline.config.environment`)."""
    cls, prefix = SETTINGS[service]
    return environment(cls, prefix, **values)


def tls_env(config: StackConfig, service: str, identity: str = "") -> dict[str, str]:
    """``INFERLINE_<SERVICE>_TLS_*``: its server certificate (``identity``'s, when it answers
    for another: a GPU pod's preprocess is what Envoy's ``triton`` cluster reaches), and the CA
    clients need."""
    if not config.tls or service not in (*MTLS_SERVICES, EDS):
        return {}
    made, identity = stack_certs(config), identity or service
    return settings(service, tls_cert=made.cert(identity), tls_key=made.key(identity),
                    tls_ca=made.ca)  # fmt: skip


def certs_digest(config: StackConfig, *names: str) -> str:
    """A digest of the CA and the named certificates (as they are now; "" without TLS): part
    of a process's fingerprint, so `up` restarts what runs with certificates since remade."""
    if not config.tls:
        return ""
    made = stack_certs(config)
    digest = hashlib.sha256()
    for path in (made.ca, *(made.cert(name) for name in names)):
        digest.update(path.read_bytes() if path.is_file() else b"missing")
    return digest.hexdigest()[:16]


def triton_tls_args(config: StackConfig) -> list[str]:
    """Triton's flags for mTLS on its gRPC port (inferline_models.triton)."""
    if not config.tls:
        return []
    made = stack_certs(config)
    return [f"--tls-cert={made.cert(TRITON)}", f"--tls-key={made.key(TRITON)}",
            f"--tls-ca={made.ca}"]  # fmt: skip


def replica(config: StackConfig, service: str, index: int) -> Service:
    """Replica ``index`` of ``service``: its own ports (base + step · index), the others
    reached through Envoy."""
    ports = config.replica_ports(service, index)
    address = f"{HOST}:{ports[0]}"
    name = replica_name(service, index)
    models = config.served_models()
    tls = envoy_client_tls(config) if config.tls else None
    if service == TRITON:
        return triton_replica(config, index)
    port, metrics_port, *rest_port = ports  # middleman: and its REST port
    env = settings(service, host=HOST, port=port, metrics_port=metrics_port)
    checked = {BATCHER: models, PREPROCESS: ["preprocess"], MIDDLEMAN: ["classifier"]}[service]
    env.update(capacity_env(service))
    env.update(tls_env(config, service))
    if service == BATCHER:
        env.update(batcher_upstream(config))
    elif service == MIDDLEMAN:
        upstream = BATCHER if config.batcher else TRITON
        remote_decode = config.placement == REMOTE
        env.update(
            settings(
                MIDDLEMAN,
                triton_url=config.upstream(upstream),
                triton_model=config.model,
                repository=config.model_repository,
                models=",".join(models[1:]),
                placement=config.placement,
                preprocess_url=config.listener(PREPROCESS) if remote_decode else "",
                rest_port=rest_port[0],
            )
        )
        env.update(xds_bootstrap_env(config, upstream))
    env.update(traceview.otel_env(config))
    return Service(
        name=name,
        argv=python(service),
        address=address,
        check=lambda: health.ready(address, *checked, tls=tls),
        env=env,
        metrics=f"http://{HOST}:{metrics_port}/metrics",
        cluster=service,
        port=port,
        also=((MIDDLEMAN_REST, rest_port[0]),) if rest_port else (),
        certs=certs_digest(config, service),
        tls=tls,
    )


def triton_command(config: StackConfig, index: int) -> list[str]:
    """Triton replica ``index``'s own command line (in-pod, the pod runs it)."""
    grpc_port, http_port, metrics_port, *_ = config.replica_ports(TRITON, index)
    name = replica_name(TRITON, index)
    return python(
        "inferline_models.triton",
        f"--repository={config.model_repository}",
        *(f"--model={model}" for model in config.served_models()),
        f"--address={HOST}",
        f"--grpc-port={grpc_port}",
        f"--http-port={http_port}",
        f"--metrics-port={metrics_port}",
        f"--workspace={leftovers.workspace(config.run_dir, name).resolve()}",
        # (in-pod, its one client is the preprocess beside it, over the same mTLS)
        *triton_tls_args(config),
        *shlex.split(config.triton_args),
    )


def triton_replica(config: StackConfig, index: int) -> Service:
    """Triton replica ``index``: Triton alone, its gRPC port Envoy's endpoint; or, in-pod, a
    GPU pod (:mod:`inferline_stack.pod`): Triton, reached only by the preprocess beside it
    (loopback, shared memory), whose port is the endpoint."""
    grpc_port, _, metrics_port, pod_port, pod_metrics_port = config.replica_ports(TRITON, index)
    name = replica_name(TRITON, index)
    models = config.served_models()
    tls = envoy_client_tls(config) if config.tls else None
    in_pod = config.placement == IN_POD
    port = pod_port if in_pod else grpc_port
    address = f"{HOST}:{port}"
    replica = Service(
        name=name,
        argv=triton_command(config, index),
        address=address,
        check=lambda: health.ready(address, *models, tls=tls),
        env=traceview.otel_env(config),
        metrics=f"http://{HOST}:{metrics_port}/metrics",
        cluster=TRITON,
        port=port,
        certs=certs_digest(config, TRITON),
        tls=tls,
    )
    if not in_pod:
        return replica
    token = run_path(config, "pods").resolve() / f"{name}.token"
    env = {
        **settings(
            PREPROCESS,
            host=HOST,
            port=pod_port,
            metrics_port=pod_metrics_port,
            triton_url=f"{HOST}:{grpc_port}",
            triton_token_file=token,
            shm_prefix=shm_prefix(config, name),
        ),
        **capacity_env(PREPROCESS),
        # Envoy's `triton` cluster reaches the pod: it answers as triton; it calls its Triton
        # with the same certificate (loopback is open to every local process here).
        **tls_env(config, PREPROCESS, identity=TRITON),
        **(settings(PREPROCESS, triton_tls=True) if config.tls else {}),
        **replica.env,  # the trace view's OTLP variables, for the pod's Triton too
    }
    argv = python(
        "inferline_stack.pod",
        f"--token-file={token}",
        f"--triton={shlex.join(replica.argv)}",
        f"--preprocess={shlex.join(python(PREPROCESS))}",
    )
    return dataclasses.replace(
        replica,
        argv=argv,
        env=env,
        # What Envoy checks too: the pod answers SERVING once its Triton is ready and its
        # shared-memory regions are registered, a moment after its models answer ready.
        check=lambda: health.serving(address, tls=tls) and health.ready(address, *models, tls=tls),
        pod_metrics=f"http://{HOST}:{pod_metrics_port}/metrics",
    )


def shm_prefix(config: StackConfig, name: str) -> str:
    """Replica ``name``'s shared-memory ring, ``/dev/shm/inferline-<stack>-<name>-<slot>``: one
    prefix per stack (its run folder's digest) and pod, so that stacks side by side never meet."""
    stack = hashlib.sha256(str(Path(config.run_dir).resolve()).encode()).hexdigest()[:8]
    return f"{SHM_PREFIX}-{stack}-{name}"


def capacity_env(service: str) -> dict[str, str]:
    """What a batcher or preprocess replica holds: all that every middleman the stack may scale
    to admits (inferline.capacity), since one replica of each may serve them all."""
    admitted = str(capacity.ADMITTED_REQUESTS * MAX_REPLICAS)
    if service == BATCHER:
        return settings(BATCHER, max_queue=admitted)
    if service == PREPROCESS:
        return settings(PREPROCESS, max_inflight=admitted)
    return {}


def batcher_upstream(config: StackConfig) -> dict[str, str]:
    """Envoy's Triton listener (the batch hop stays Envoy's: config.PROXYLESS_CLUSTERS)."""
    # At most one batch in flight per Triton replica the stack may scale to; the batcher's
    # adaptive limit keeps fewer while they queue at the replicas running now. Overridable.
    inflight = settings(BATCHER, max_inflight=MAX_REPLICAS)
    inflight = {name: os.environ.get(name, value) for name, value in inflight.items()}
    return {**settings(BATCHER, upstream_url=config.listener(TRITON)), **inflight}


def xds_bootstrap_env(config: StackConfig, dialled: str) -> dict[str, str]:
    """gRPC's xDS bootstrap for a service that dials ``dialled`` proxyless."""
    if dialled not in config.proxyless_clusters:
        return {}
    return {proxyless.BOOTSTRAP_FILE_ENV: str(run_path(config, XDS_BOOTSTRAP).resolve())}


def write_xds_bootstrap(config: StackConfig) -> None:
    if config.proxyless_clusters:
        proxyless.write_bootstrap(run_path(config, XDS_BOOTSTRAP), f"{HOST}:{config.eds_port}")


def eds(config: StackConfig) -> Service:
    """The control plane, reading the endpoints file that ``up`` and ``scale`` rewrite."""
    address = f"{HOST}:{config.eds_port}"
    tls = envoy_client_tls(config) if config.tls else None
    env = settings(
        EDS,
        host=HOST,
        port=config.eds_port,
        metrics_port=config.eds_metrics_port,
        endpoints_file=endpoints_path(config).resolve(),
        services=",".join(CLUSTERS),
    )
    return Service(
        name=EDS,
        argv=python("eds"),
        address=address,
        check=lambda: health.serving(address, tls=tls),
        env={**env, **tls_env(config, EDS), **traceview.otel_env(config)},
        metrics=f"http://{HOST}:{config.eds_metrics_port}/metrics",
        tls=tls,
        certs=certs_digest(config, EDS),
    )


def trace_view(config: StackConfig) -> Service:
    """MLflow's tracking server, the stack's trace view (:mod:`inferline_stack.traceview`): one
    worker, its store a SQLite file under the run folder, nothing phoned home."""
    data = run_path(config, traceview.MLFLOW).resolve()
    url = config.trace_view_url
    return Service(
        name=traceview.MLFLOW,
        argv=[
            traceview.binary(config) or config.mlflow,
            "server",
            f"--backend-store-uri=sqlite:///{data / 'mlflow.db'}",
            f"--default-artifact-root={data / 'artifacts'}",
            f"--host={HOST}",
            f"--port={config.trace_view_port}",
            "--workers=1",
        ],
        address=url,
        check=lambda: traceview.ready(url),
        env={
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "true",
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",  # no job runner: a trace view only
        },
    )
