"""Real processes on free ports for the control-plane tests and benchmarks.

The real Envoy (rendered from the one template), the control plane (``python -m eds``) and
fake backends (``python -m inferline_testing.fake_backend``), each a process of its own with its log
in a run directory; a :class:`Pool` scales a cluster the way the local stack's ``make scale``
does (start, wait for health, announce; to scale down: DRAINING, wait until Envoy has nothing
in flight to it, stop, remove). Load comes from the demo client.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from demo_client.client import open_clients
from demo_client.load import LoadConfig, run_load
from demo_client.stats import Recorder, Summary
from eds.cache import Endpoint, Health
from inferline import kserve
from inferline_envoy import admin as envoy_admin
from inferline_envoy.binary import envoy_binary
from inferline_envoy.params import LOCAL, EnvoyParams
from inferline_envoy.render import render
from inferline_envoy.template import dump
from inferline_stack import reaper, scaling
from inferline_stack.config import BATCHER
from inferline_stack.services import EDS, settings
from inferline_testing.fake_backend import STATS_MODEL
from inferline_testing.ports import free_port
from inferline_testing.waits import wait_for, wait_for_state

logger = logging.getLogger(__name__)

START_TIMEOUT_S = 30.0


class Process:
    """A child process in its own session, its output in ``log``; stopping it stops whatever it
    started too (:mod:`inferline_stack.reaper`)."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str]) -> None:
        self.name, self.argv, self.log, self.env = name, list(argv), log, dict(env)
        self.proc: asyncio.subprocess.Process | None = None
        self.claim: reaper.Claim | None = None  # its process group, once started

    async def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        out = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
            self.claim = reaper.Claim.leading(self.proc.pid)
        finally:
            os.close(out)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace_s`` to whatever of its group is left; its exit
        status."""
        if self.proc is None or self.claim is None:
            return None
        await asyncio.to_thread(reaper.stop, [self.claim], grace_s)
        return await self.proc.wait()

    async def kill(self) -> int | None:
        """``kill -9``."""
        if self.proc is None:
            return None
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        return await self.proc.wait()

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def exited(self) -> str | None:
        """Why a wait on this process should give up: it is no longer running."""
        return None if self.running else f"{self.name} exited:\n{self.tail()}"


async def serving(address: str) -> bool:
    """grpc.health.v1 Check("") at ``address`` answers SERVING."""
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=1.0
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


async def wait_serving(address: str, process: Process | None, timeout_s: float) -> None:
    """Poll grpc.health.v1 until SERVING; fail early if ``process`` exits."""
    abort = process.exited if process is not None else None
    await wait_for(lambda: serving(address), timeout_s, f"{address} SERVING", abort=abort)


def python(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


# -- the processes ----------------------------------------------------------------------------


class FakeBackend(Process):
    """One fake backend (``python -m inferline_testing.fake_backend``): a replica that says who
    it is."""

    def __init__(
        self, run_dir: Path, replica_id: str, delay_ms: float = 2.0, fail: str = ""
    ) -> None:
        self.replica_id, self.port = replica_id, free_port()
        argv = python("inferline_testing.fake_backend", f"--port={self.port}", f"--id={replica_id}")
        super().__init__(
            f"fake backend {replica_id}",
            [*argv, f"--delay-ms={delay_ms}", "--grace-s=5", *([f"--fail={fail}"] if fail else [])],
            run_dir / "logs" / f"{replica_id}.log",
            {},
        )

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def endpoint(self, health: Health = Health.HEALTHY, weight: int = 1) -> Endpoint:
        return Endpoint("127.0.0.1", self.port, health, weight, "local", self.replica_id)

    async def start_ready(self) -> None:
        await self.start()
        await wait_serving(self.address, self, START_TIMEOUT_S)

    async def stats(self) -> tuple[int, float]:
        """(inference requests served, wall-clock time of the first one or 0)."""
        reply = await self._stats()
        requests = int(kserve.output_array(reply, "REQUESTS")[0])
        first = float(kserve.output_array(reply, "FIRST_REQUEST_UNIX")[0])
        return requests, first

    async def items(self) -> int:
        """The items (rows) it was asked to infer, failed calls included."""
        return int(kserve.output_array(await self._stats(), "ITEMS")[0])

    async def attempts(self) -> Counter[bytes]:
        """How many times it was asked for each BYTES item (an encoded image), failed calls
        included."""
        reply = await self._stats()
        asked, counts = kserve.output_array(reply, "ASKED"), kserve.output_array(reply, "ATTEMPTS")
        return Counter({bytes(a): int(n) for a, n in zip(asked, counts, strict=True)})

    async def _stats(self) -> service_pb2.ModelInferResponse:
        async with grpc.aio.insecure_channel(self.address) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            request = service_pb2.ModelInferRequest(model_name=STATS_MODEL)
            reply: service_pb2.ModelInferResponse = await stub.ModelInfer(request, timeout=2.0)
        return reply


class EdsProcess(Process):
    """The control plane with the file source.

    ``host``: where it listens and is reached; ``prefix``: what its command line runs under
    (``ip netns exec NAME``, for a control plane in a network namespace of its own).
    """

    def __init__(
        self,
        run_dir: Path,
        endpoints: Path,
        services: Sequence[str],
        poll_interval_s: float = 0.1,
        host: str = "127.0.0.1",
        prefix: Sequence[str] = (),
    ) -> None:
        self.host = host
        self.port, self.metrics_port = free_port(), free_port()
        env = settings(
            EDS,
            host=host,
            port=self.port,
            metrics_port=self.metrics_port,
            endpoints_file=endpoints,
            services=",".join(services),
            poll_interval_s=poll_interval_s,
        )
        super().__init__("eds", [*prefix, *python("eds")], run_dir / "logs" / "eds.log", env)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def start_ready(self) -> None:
        await self.start()
        await wait_serving(self.address, self, START_TIMEOUT_S)


class BatcherProcess(Process):
    """``python -m batcher`` in front of ``upstream`` (Envoy's listener of the pool, say), set
    up through its Config's settings (``config``: any of them, by field name)."""

    def __init__(
        self,
        run_dir: Path,
        upstream: str,
        config: Mapping[str, object] | None = None,
        replica_id: str = "batcher-0",
    ) -> None:
        self.replica_id, self.port, self.metrics_port = replica_id, free_port(), free_port()
        env = settings(
            BATCHER, host="127.0.0.1", port=self.port, metrics_port=self.metrics_port,
            upstream_url=upstream, **(config or {}),
        )  # fmt: skip
        super().__init__(replica_id, python("batcher"), run_dir / "logs" / f"{replica_id}.log", env)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def endpoint(self) -> Endpoint:
        return Endpoint("127.0.0.1", self.port, Health.HEALTHY, 1, "local", self.replica_id)

    async def start_ready(self) -> None:
        await self.start()
        await wait_serving(self.address, self, START_TIMEOUT_S)


class EnvoyProcess(Process):
    """The real Envoy, configured from the template with free ports."""

    def __init__(
        self,
        run_dir: Path,
        params: EnvoyParams,
        name: str = "envoy",
        config: Mapping[str, Any] | None = None,  # instead of rendering ``params``
    ) -> None:
        self.params = params
        self.config_path = run_dir / f"{name}.yaml"
        self.config_path.parent.mkdir(parents=True, exist_ok=True)
        rendered = render(params) if config is None else config
        self.config_path.write_text(dump(rendered))
        argv = [
            envoy_binary(),
            "-c", str(self.config_path),
            "--disable-hot-restart",  # several Envoys on one machine, no shared memory
            "--concurrency", "2",
            "-l", "warning",
        ]  # fmt: skip
        super().__init__(name, argv, run_dir / "logs" / f"{name}.log", {})

    @property
    def admin(self) -> str:
        return f"http://{self.params.admin_address}:{self.params.admin_port}"

    def listener(self, cluster: str) -> str:
        port = dict(self.params.listeners)[cluster]
        return f"127.0.0.1:{port}"

    async def start_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        await self.start()
        ready = functools.partial(envoy_admin.ready, self.admin)
        await wait_for(ready, timeout_s, f"{self.name} ready", abort=self.exited)


def envoy_params(
    xds_port: int, clusters: Sequence[str], xds_api: str = "GRPC", **overrides: Any
) -> EnvoyParams:
    """Local-profile parameters on free ports for ``clusters`` (gRPC only: no REST cluster)."""
    return dataclasses.replace(
        LOCAL,
        listeners=tuple((c, free_port()) for c in clusters),
        admin_port=free_port(),
        xds_port=xds_port,
        xds_api=xds_api,
        node_id=f"envoy-{xds_api.lower()}-{os.getpid()}",
        **{"rest": (), **overrides},
    )


# -- scaling a cluster ------------------------------------------------------------------------


@dataclass
class ScaleUp:
    replica: str
    ready_unix: float  # when it was written HEALTHY to the endpoints file
    first_request_unix: float = 0.0

    @property
    def convergence_s(self) -> float | None:
        if not self.first_request_unix:
            return None
        return self.first_request_unix - self.ready_unix


@dataclass
class Pool:
    """One cluster's replicas behind Envoy, announced through the endpoints file."""

    cluster: str
    run_dir: Path
    endpoints: Path
    admin: str
    delay_ms: float = 2.0
    replicas: list[FakeBackend] = field(default_factory=list)
    started: int = 0

    async def add(self) -> tuple[FakeBackend, ScaleUp]:
        """Start a replica, wait for its health, then write it HEALTHY (the "ready" moment)."""
        replica = FakeBackend(self.run_dir, f"{self.cluster}-{self.started}", self.delay_ms)
        self.started += 1
        try:
            await replica.start_ready()
        except BaseException:  # not one of the pool's yet: :meth:`close` would not stop it
            await replica.stop(2.0)
            raise
        await scaling.announce(self.endpoints, [(self.cluster, replica.endpoint())])
        self.replicas.append(replica)
        return replica, ScaleUp(replica.replica_id, time.time())

    async def remove(
        self, replica: FakeBackend | None = None, drain_timeout_s: float = 30.0
    ) -> FakeBackend:
        """DRAINING, wait until Envoy has nothing in flight to it, stop it, forget it."""
        replica = replica or self.replicas[-1]
        drained = await scaling.drain(
            self.endpoints, [(self.cluster, replica.endpoint())], self.admin, replica.stop,
            drain_timeout_s,
        )  # fmt: skip
        if not drained:
            raise RuntimeError(f"Envoy did not confirm the drain of {replica.replica_id}")
        self.replicas.remove(replica)
        return replica

    async def first_request(
        self, replica: FakeBackend, event: ScaleUp, timeout_s: float = 30.0
    ) -> None:
        """Wait until ``replica`` has served a request; record when its first one arrived."""

        async def first() -> float:
            requests, first_unix = await replica.stats()
            return first_unix if requests else 0.0

        what = f"a first request at {replica.replica_id}"
        event.first_request_unix = await wait_for(first, timeout_s, what)

    async def close(self) -> None:
        await asyncio.gather(*(p.stop(2.0) for p in self.replicas))
        self.replicas.clear()


# -- load from the demo client ----------------------------------------------------------------


@contextlib.asynccontextmanager
async def load(
    target: str,
    concurrency: int = 8,
    channels: int = 2,
    timeout_s: float = 10.0,
    images: Sequence[bytes] = (b"image",),
) -> AsyncIterator[Recorder]:
    """The demo client's closed-loop load on ``target`` while the block runs.

    The recorder counts every finished request; leaving the block stops the load (requests
    in flight are abandoned, not counted). Model ``classifier``, one of ``images`` a request
    (default: one tiny "image", which a fake backend answers without decoding).
    """
    recorder = Recorder(concurrency=concurrency)
    stop = asyncio.Event()
    config = LoadConfig(
        model="classifier", concurrency=concurrency, timeout_s=timeout_s, duration_s=3600.0
    )
    async with open_clients(target, channels) as clients:
        task = asyncio.create_task(run_load(clients, config, list(images), recorder, stop))
        try:
            yield recorder
        finally:
            stop.set()
            await task


async def flowing(recorder: Recorder, requests: int = 50, timeout_s: float = 60.0) -> None:
    """Wait until ``requests`` more requests have finished (the load is flowing)."""
    target = recorder.requests + requests

    def done() -> bool:
        return recorder.requests >= target

    await wait_for_state(done, timeout_s, f"{requests} more requests (from {recorder.requests})")


def summary_text(summary: Summary, errors: Mapping[str, int]) -> str:
    p50 = f"{summary.p50_ms:.1f}" if summary.p50_ms is not None else "-"
    return (
        f"{summary.requests} requests, {summary.errors} failed {dict(errors)}, "
        f"{summary.images_per_s:.0f}/s, p50 {p50} ms"
    )


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")
