"""The processes the benchmark runs, each on free ports with its log in the run directory.

Simulated-GPU Triton replicas (``python -m inferline_models.triton --model simulated_gpu``),
batchers (``python -m batcher``) and, for the scale-out part, the real Envoy rendered from the
project's one template, fed over ADS by the real control plane reading an endpoints file —
the deployed arrangement, not a configuration of the benchmark's own.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import tritonclient.grpc

from bench.batcher.params import Params
from eds.cache import Endpoint
from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin
from inferline_envoy import proxyless
from inferline_models.triton import ACCESS_TOKEN_ENV
from inferline_stack import health
from inferline_stack.config import BATCHER
from inferline_stack.services import settings
from inferline_testing.harness import EdsProcess, EnvoyProcess, Process, envoy_params, python
from inferline_testing.ports import free_port
from inferline_testing.waits import wait_for

MODEL = "simulated_gpu"
HOST = "127.0.0.1"
ACCESS_HEADER = "triton-grpc-protocol-triton-access-token"
START_TIMEOUT_S = 180.0  # a replica (PyTriton starting Triton) on a busy small machine
ROUTABLE_TIMEOUT_S = 60.0  # Envoy: the endpoint pushed, its first health check passed
STOP_GRACE_S = 20.0
QUIET = {"INFERLINE_LOG_LEVEL": "WARNING"}

P = TypeVar("P", bound=Process)


class Replica(Process):
    """One simulated GPU: Triton through PyTriton, a batch of b taking (t0 + k·b)·``scale``.

    ``max_queue_delay_us`` turns Triton's dynamic batcher on with that delay; ``None`` runs
    each request as it comes (the batcher service batches instead).
    """

    def __init__(
        self,
        run_dir: Path,
        name: str,
        params: Params,
        scale: float,
        max_queue_delay_us: int | None,
    ) -> None:
        self.port = free_port()
        self.token = secrets.token_urlsafe(16)  # for the statistics, which PyTriton protects
        argv = python(
            "inferline_models.triton",
            f"--model={MODEL}",
            f"--address={HOST}",
            f"--grpc-port={self.port}",
            f"--http-port={free_port()}",
            f"--metrics-port={free_port()}",
            f"--max-batch-size={params.max_batch}",
            f"--simulated-t0-ms={params.t0_ms * scale}",
            f"--simulated-k-ms={params.k_ms * scale}",
        )
        if max_queue_delay_us is None:
            argv.append("--no-dynamic-batching")
        else:
            argv.append(f"--max-queue-delay-us={max_queue_delay_us}")
        env = {ACCESS_TOKEN_ENV: self.token, **QUIET}
        super().__init__(name, argv, run_dir / "logs" / f"{name}.log", env)

    @property
    def url(self) -> str:
        return f"{HOST}:{self.port}"

    def endpoint(self) -> Endpoint:
        return Endpoint(HOST, self.port, name=self.name)

    def counters(self) -> dict[str, float]:
        """Triton's per-execution statistics: executions, images, busy (compute) seconds.

        (Prometheus' nv_inference_compute_infer_duration_us charges a batch's time to every
        request in it, so it overstates busy time under dynamic batching; these do not.)
        """
        client = tritonclient.grpc.InferenceServerClient(self.url)
        try:
            stats = client.get_inference_statistics(MODEL, headers={ACCESS_HEADER: self.token})
        finally:
            client.close()
        executions = images = busy_ns = 0
        for batch in stats.model_stats[0].batch_stats:
            executions += batch.compute_infer.count
            images += batch.batch_size * batch.compute_infer.count
            busy_ns += batch.compute_infer.ns
        return {"executions": executions, "images": images, "busy_s": busy_ns / 1e9}

    async def stop(self, grace_s: float = STOP_GRACE_S) -> int | None:
        """SIGTERM (PyTriton stops its Triton server), then whatever is left of the group."""
        return await super().stop(grace_s)


def counters(replicas: Sequence[Replica]) -> dict[str, float]:
    """:meth:`Replica.counters` summed over ``replicas``."""
    total: dict[str, float] = {}
    for replica in replicas:
        for name, value in replica.counters().items():
            total[name] = total.get(name, 0.0) + value
    return total


class Batcher(Process):
    """The batcher service in front of ``upstream``."""

    def __init__(
        self,
        run_dir: Path,
        name: str,
        upstream: str,
        delay_ms: float,
        max_inflight: int,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        settings_env = {
            **settings(
                BATCHER,
                host=HOST,
                port=self.port,
                metrics_port=self.metrics_port,
                upstream_url=upstream,
                max_queue_delay_ms=delay_ms,
                max_inflight=max_inflight,
                max_queue=100000,
            ),
            **QUIET,
            **(env or {}),
        }
        super().__init__(name, python("batcher"), run_dir / "logs" / f"{name}.log", settings_env)

    @property
    def url(self) -> str:
        return f"{HOST}:{self.port}"


class Forwarder(Process):
    """A bare grpc.aio forwarder in front of ``upstream`` (bench.hops: raw-bytes generic
    handlers, no parsing): what any Python hop costs, the floor the batcher is measured against."""

    def __init__(self, run_dir: Path, name: str, upstream: str) -> None:
        self.port = free_port()
        argv = python("bench.hops", "upstream", str(self.port), upstream)
        super().__init__(name, argv, run_dir / "logs" / f"{name}.log", QUIET)

    @property
    def url(self) -> str:
        return f"{HOST}:{self.port}"


class Fleet:
    """Every process the benchmark starts; :meth:`close` stops them all."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.processes: list[Process] = []
        self.eds_port = 0  # behind_envoy's control plane

    async def replica(
        self, name: str, params: Params, scale: float, max_queue_delay_us: int | None
    ) -> Replica:
        """Start a replica (:meth:`ready` waits for it)."""
        replica = self._track(Replica(self.run_dir, name, params, scale, max_queue_delay_us))
        await replica.start()
        return replica

    async def batcher(
        self,
        name: str,
        upstream: str,
        delay_ms: float,
        max_inflight: int,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """Start a batcher in front of ``upstream`` and wait until it is ready; its address."""
        batcher = self._track(Batcher(self.run_dir, name, upstream, delay_ms, max_inflight, env))
        await batcher.start()
        await self.ready([batcher])
        return batcher.url

    async def forwarder(self, name: str, upstream: str) -> str:
        """Start a bare forwarder in front of ``upstream`` and wait until it is ready."""
        forwarder = self._track(Forwarder(self.run_dir, name, upstream))
        await forwarder.start()
        await self.ready([forwarder])
        return forwarder.url

    def batcher_metrics(self, url: str) -> str:
        """The /metrics address of the batcher serving at ``url``."""
        found = next(p for p in self.processes if isinstance(p, Batcher) and p.url == url)
        return f"http://{HOST}:{found.metrics_port}/metrics"

    async def ready(self, servers: Sequence[Replica | Batcher | Forwarder]) -> None:
        """Wait until each answers KServe ServerReady and ModelReady for the model."""

        async def one(server: Replica | Batcher | Forwarder) -> None:
            async def ready() -> bool:
                return await asyncio.to_thread(health.ready, server.url, MODEL)

            what = f"{server.name} at {server.url} ready"
            await wait_for(ready, START_TIMEOUT_S, what, abort=server.exited)

        await asyncio.gather(*(one(server) for server in servers))

    async def behind_envoy(self, clusters: Mapping[str, Sequence[Replica]]) -> dict[str, str]:
        """The real Envoy with a listener and an EDS cluster per entry of ``clusters``, whose
        endpoints the control plane serves from an endpoints file; returns once Envoy routes to
        every replica of every cluster. Cluster name -> the address of its listener."""
        endpoints = self.run_dir / "endpoints.yaml"
        endpoints_file.write(
            endpoints,
            {name: [r.endpoint() for r in replicas] for name, replicas in clusters.items()},
        )
        eds = self._track(EdsProcess(self.run_dir, endpoints, list(clusters)))
        await eds.start_ready()
        self.eds_port = eds.port
        envoy = self._track(EnvoyProcess(self.run_dir, envoy_params(eds.port, list(clusters))))
        await envoy.start_ready()
        await asyncio.gather(
            *(
                envoy_admin.wait_routable(envoy.admin, name, HOST, r.port, ROUTABLE_TIMEOUT_S)
                for name, replicas in clusters.items()
                for r in replicas
            )
        )
        return {name: envoy.listener(name) for name in clusters}

    def xds_bootstrap_env(self) -> dict[str, str]:
        """gRPC's xDS bootstrap for the control plane :meth:`behind_envoy` started: what a
        batcher dialling ``xds:///<cluster>`` needs."""
        path = proxyless.write_bootstrap(
            self.run_dir / "xds-bootstrap.json", f"{HOST}:{self.eds_port}"
        )
        return {proxyless.BOOTSTRAP_FILE_ENV: str(path)}

    def _track(self, process: P) -> P:
        self.processes.append(process)
        return process

    async def close(self) -> None:
        """Stop everything: the batchers, Envoy and the control plane, then the replicas."""
        replicas = [p for p in self.processes if isinstance(p, Replica)]
        for tier in ([p for p in self.processes if p not in replicas], replicas):
            await asyncio.gather(*(p.stop(STOP_GRACE_S) for p in tier))
        self.processes.clear()
