"""``up`` and ``down``: the whole local stack, every hop through the real Envoy.

up, in order: the endpoints file (every cluster, with the replicas still running), the
control plane, Envoy, then replica 0 of Triton (in-pod: a GPU pod, Triton and the preprocess
beside it), the batcher, preprocess (remote placement only) and middleman, started at once and
announced to Envoy in that order, each once ready (a later one reaches an earlier one through
Envoy); last, readiness through the public endpoint. Processes already running with the same
configuration and healthy are kept, so ``up`` is idempotent. down stops everything, front to
back, with no process left behind: also what a supervisor killed alone left running.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from eds.sources import endpoints_file
from inferline import tracing
from inferline_envoy import binary as envoy_binary
from inferline_stack import (
    auth,
    certs,
    health,
    leftovers,
    prometheus,
    remember,
    services,
    traceview,
)
from inferline_stack import envoy as stack_envoy
from inferline_stack.config import (
    BATCHER,
    CLUSTERS,
    MAX_REPLICAS,
    MIDDLEMAN,
    PREPROCESS,
    SERVICES,
    TRITON,
    StackConfig,
)
from inferline_stack.lock import scale_lock
from inferline_stack.processes import ProcessTable
from inferline_stack.replicas import StackError, add, forget, start_ready, track
from inferline_stack.services import EDS, ENVOY, Service, parse_replica_name, replica_name
from inferline_stack.ui import console, plain

PUBLIC_MODEL = "classifier"
PUBLIC_TIMEOUT_S = 30.0


def up(config: StackConfig, table: ProcessTable) -> int:
    """Start what is not running; 0 when the public endpoint answers ready, else 1 (stopped)."""
    try:
        with scale_lock(Path(config.run_dir)):
            _up(config, table)
    except StackError as exc:
        console.print(f"[red]✗ {exc}[/]")
        if exc.log:
            plain(exc.log)
        down(config, table)
        return 1
    tls = f" over TLS (trust {services.stack_certs(config).ca})" if config.tls else ""
    console.print(
        f"stack up: public endpoint localhost:{config.public_port} (Envoy){tls}; "
        "'make status' shows each cluster as Envoy sees it"
    )
    if table.running(prometheus.PROMETHEUS):
        console.print(f"Prometheus: {config.prometheus_url} (every process, every replica)")
    if table.running(traceview.MLFLOW):
        console.print(f"traces: {traceview.traces_url(config)} (MLflow's trace view)")
    elif config.tracing:
        console.print(f"traces: to {tracing.traces_endpoint()} (OTEL_EXPORTER_OTLP_ENDPOINT)")
    return 0


def _up(config: StackConfig, table: ProcessTable) -> None:
    remember.remember(config)  # what `scale` and `status` in another shell act on
    if config.tls:
        try:
            made = certs.ensure(config.certs_path)  # `make certs`, when not made yet
        except certs.CertError as exc:
            raise StackError(f"INFERLINE_STACK_TLS=true: {exc}") from None
        console.print(f"[green]✓[/] TLS: certificates in {made.dir} (CA {made.ca})")
    if config.auth:
        files = auth.ensure(config.auth_path)  # `make token`, when not made yet
        console.print(f"[green]✓[/] auth: tokens required; the demo client's is {files.token}")
    _stop_strays(config, table)
    _trace_view(config, table)  # before any process that sends it spans
    kept = _keep_replicas(config, table)
    leftovers.free_orphans()  # what replicas killed before this `up` left
    endpoints_file.write(
        services.endpoints_path(config),
        {c: [e for s in kept for m, e in s.members() if m == c] for c in CLUSTERS},
    )
    services.write_xds_bootstrap(config)
    _ensure(config, table, services.eds(config))
    envoy = stack_envoy.service(config)
    if _keep(table, envoy):
        console.print(f"[green]✓[/] envoy already running at {envoy.address}")
    else:
        path = services.run_path(config, "envoy.yaml")
        path.write_text(envoy.inputs, encoding="utf-8")
        ok, output = envoy_binary.validate(path)
        if not ok:
            raise StackError(f"envoy --mode validate rejects {path}:", output[-3000:])
        _ensure(config, table, envoy)
    _prometheus(config, table)
    for replica in kept:
        console.print(f"[green]✓[/] {replica.name} already running at {replica.address}")
    names = {replica.name for replica in kept}
    add(  # every tier's replica 0 that does not run, started at once, announced upstream first
        config,
        table,
        [
            services.replica(config, service, 0)
            for service in config.services
            if replica_name(service, 0) not in names
        ],
    )
    public = f"127.0.0.1:{config.public_port}"
    start = time.monotonic()
    if not health.wait_until(
        lambda: health.ready(public, PUBLIC_MODEL, tls=services.public_tls(config)),
        PUBLIC_TIMEOUT_S,
        lambda: table.running(ENVOY),
    ):
        raise StackError(
            f"the public endpoint {public} (Envoy -> middleman) is not ready after "
            f"{PUBLIC_TIMEOUT_S:g}s; last lines of {table.log_file(ENVOY)}:",
            table.log_tail(ENVOY),
        )
    console.print(
        f"[green]✓[/] {PUBLIC_MODEL} ready through Envoy at {public} "
        f"({time.monotonic() - start:.2f}s)"
    )


def _prometheus(config: StackConfig, table: ProcessTable) -> None:
    """Start Prometheus when it is wanted and installed; the stack runs without it."""
    if not config.prometheus:
        table.stop(prometheus.PROMETHEUS, config.stop_grace_s)
        return
    if prometheus.binary() is None:
        console.print(
            f"[yellow]![/] no Prometheus on PATH: running without it ({prometheus.INSTALL_HINT})"
        )
        return
    try:
        server = prometheus.service(config)
    except OSError as exc:
        raise StackError(f"cannot read the Prometheus configuration: {exc}") from None
    track(config, table)  # eds and Envoy, before the first scrape
    if not _keep(table, server):
        prometheus.write_config(config, server)
    _ensure(config, table, server)
    track(config, table)


def _trace_view(config: StackConfig, table: ProcessTable) -> None:
    """Start MLflow's trace view when the stack's spans go to none of the user's."""
    if not traceview.runs_backend(config):
        table.stop(traceview.MLFLOW, config.stop_grace_s)
        traceview.forget_view_file(config)
        return
    if traceview.binary(config) is None:
        raise StackError(
            f"INFERLINE_STACK_TRACING=true: no trace view at {config.mlflow} "
            f"({traceview.INSTALL_HINT}); or set OTEL_EXPORTER_OTLP_ENDPOINT to your collector"
        )
    _ensure(config, table, services.trace_view(config))
    traceview.write_view_file(config)


def _keep(table: ProcessTable, service: Service) -> bool:
    """Running, started with today's configuration, and healthy: leave it alone."""
    if not table.running(service.name) or table.fingerprint(service.name) != service.fingerprint():
        return False
    # A replica's own health (what Envoy checks): its readiness may pass through hops not up yet.
    return health.serving(service.address, tls=service.tls) if service.cluster else service.check()


def _ensure(config: StackConfig, table: ProcessTable, service: Service) -> None:
    if _keep(table, service):
        console.print(f"[green]✓[/] {service.name} already running at {service.address}")
        return
    if table.running(service.name):
        console.print(f"restarting {service.name} (configuration changed, or not healthy)")
    took = start_ready(config, table, service)
    console.print(f"[green]✓[/] {service.name} ready at {service.address} ({took:.1f}s)")


def _keep_replicas(config: StackConfig, table: ProcessTable) -> list[Service]:
    """The replicas that keep running (healthy, same configuration); stop the others."""
    kept, recorded, stale = [], set(table.names()), []
    for service in SERVICES:
        for index in range(MAX_REPLICAS):
            name = replica_name(service, index)
            if not table.running(name):
                if name in recorded:
                    stale.append(name)  # a stale pid file, what a crash left
                continue
            if service not in config.services:
                table.stop(name, config.stop_grace_s)
                console.print(f"stopped {name} (not part of this configuration)")
                continue
            replica = services.replica(config, service, index)
            if _keep(table, replica):
                kept.append(replica)
            else:
                table.stop(name, config.stop_grace_s)
                console.print(f"stopped {name} (configuration changed, or not healthy)")
    if stale:
        forget(table, stale)
    return kept


def _stop_strays(config: StackConfig, table: ProcessTable) -> None:
    """Processes of an older layout of the stack (``triton``, ``middleman``) hold its ports."""
    for name in table.names():
        fixed = (EDS, ENVOY, prometheus.PROMETHEUS, traceview.MLFLOW)
        stray = name not in fixed and parse_replica_name(name) is None
        if stray and table.stop(name, config.stop_grace_s):
            console.print(f"stopped {name} (left over from an older stack)")


def down(config: StackConfig, table: ProcessTable) -> int:
    """Stop everything, front to back (middleman first, the control plane last)."""
    tiers = [
        [replica_name(s, i) for i in range(MAX_REPLICAS)]
        for s in (MIDDLEMAN, PREPROCESS, BATCHER, TRITON)
    ]
    last = [[ENVOY], [EDS], [prometheus.PROMETHEUS], [traceview.MLFLOW], table.names()]
    for names in [*tiers, *last]:
        for name in table.stop_all(names, config.stop_grace_s):
            console.print(f"stopped {name}")
    strays = table.stop_strays(config.stop_grace_s)  # what no pid file names any more
    if strays:
        console.print(f"stopped {len(strays)} more processes of this stack (pids {strays})")
    _free_leftovers(config)
    remember.forget(config.run_dir)
    traceview.forget_view_file(config)
    return 0


def _free_leftovers(config: StackConfig) -> None:
    """What killed Triton replicas left: their workspaces, and shared memory nobody maps."""
    shutil.rmtree(leftovers.workspaces(config.run_dir), ignore_errors=True)
    freed = leftovers.free_orphans()
    if freed:
        console.print(f"freed {freed / 2**20:.0f} MiB of shared memory killed Triton replicas left")
