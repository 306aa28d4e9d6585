"""The control plane and Envoy, measured: convergence, the Envoy hop, ADS fan-out, failures.

1. Convergence: under load from the demo client through the real Envoy, ``--events`` scale-ups
   of a cluster of fake backends (each followed later by a drained scale-down); for each
   new backend, the time from "written HEALTHY to the endpoints file" to its first request.
   Failed requests are counted over the whole sequence, scale-downs included.
2. The Envoy hop: the same fake backend called directly and through Envoy, one request at a time;
   p50/p99 of each and the difference.
3. Fan-out: ``--clients`` ADS clients (another process, a gRPC connection each) hold a cluster
   of ``--endpoints`` endpoints; one endpoint changes; time until the last client's ACK of the
   new version reaches the control plane. State of the world and delta.

The backends are ``inferline_testing.fake_backend`` processes (KServe v2 servers with a fixed
2 ms of simulated work, no model): this measures the control plane and the proxy, not inference.
Writes bench/results/eds.json and prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from envoy_data_plane.envoy.config.core.v3 import Node
from envoy_data_plane.envoy.service.discovery.v3 import (
    DeltaDiscoveryRequest,
    DeltaDiscoveryResponse,
    DiscoveryRequest,
    DiscoveryResponse,
)
from rich.console import Console
from rich.table import Table

from bench.benchlib import ROOT, run_main, write_result
from demo_client.client import open_clients
from demo_client.load import LoadConfig, run_load
from demo_client.stats import Recorder
from eds.cache import Endpoint, EndpointCache, Health
from eds.resources import ENDPOINTS, SnapshotBuilder
from eds.server import XdsServer
from eds.sources import endpoints_file
from eds.streams import Kind, StreamEvent
from inferline_envoy import admin as envoy_admin
from inferline_testing.harness import (
    EdsProcess,
    EnvoyProcess,
    FakeBackend,
    Pool,
    ScaleUp,
    envoy_params,
    flowing,
    load,
    percentile,
)
from inferline_testing.waits import wait_for_state

console = Console()
ADS = "/envoy.service.discovery.v3.AggregatedDiscoveryService/"
GOALS = {"convergence_p99_ms": 1000.0, "hop_added_p50_ms": 0.5, "fanout_s": 1.0, "failed": 0}


# -- 1. convergence under scaling ---------------------------------------------------------------


async def convergence(run: Path, events: int, concurrency: int) -> dict[str, Any]:
    endpoints = run / "endpoints.yaml"
    endpoints_file.write(endpoints, {"triton": []})
    eds = EdsProcess(run, endpoints, ["triton"])
    envoy = EnvoyProcess(run, envoy_params(eds.port, ["triton"]))
    pool = Pool("triton", run, endpoints, envoy.admin)
    ups: list[ScaleUp] = []
    try:
        await eds.start_ready()
        first, _ = await pool.add()
        await envoy.start_ready()
        await envoy_admin.wait_routable(envoy.admin, "triton", "127.0.0.1", first.port)
        async with load(envoy.listener("triton"), concurrency) as recorder:
            await flowing(recorder)
            while len(ups) < events:
                while len(pool.replicas) < 4 and len(ups) < events:
                    replica, event = await pool.add()
                    await pool.first_request(replica, event)
                    ups.append(event)
                    console.print(
                        f"  scale-up {len(ups)}/{events}: {replica.replica_id} served after "
                        f"{1000 * (event.convergence_s or 0):.0f} ms"
                    )
                while len(pool.replicas) > 1:
                    await pool.remove()
            await flowing(recorder)  # requests keep succeeding after the last scale-down
        summary = recorder.summary()
    finally:
        await pool.close()
        await envoy.stop()
        await eds.stop()
    values = [1000 * (e.convergence_s or 0) for e in ups]
    return {
        "events": len(ups),
        "p50_ms": round(percentile(values, 50), 1),
        "p99_ms": round(percentile(values, 99), 1),
        "max_ms": round(max(values), 1),
        "requests": summary.requests,
        "failed_requests": summary.errors,
        "failed_by_code": recorder.errors_by_code,
        "throughput_per_s": round(summary.images_per_s, 1),
    }


# -- 2. the Envoy hop ---------------------------------------------------------------------------


async def timed(target: str, requests: int) -> tuple[float, float]:
    """p50 and p99 (ms) of ``requests`` sequential requests, after a warm-up."""
    async with open_clients(target, 1) as clients:
        warm = LoadConfig(concurrency=1, duration_s=None, count=200)
        await run_load(clients, warm, [b"image"], Recorder())
        recorder = Recorder()
        config = LoadConfig(concurrency=1, duration_s=None, count=requests)
        await run_load(clients, config, [b"image"], recorder)
    p50, _, p99 = recorder.percentiles_ms()
    assert p50 is not None and p99 is not None and recorder.errors == 0
    return p50, p99


async def hop(run: Path, requests: int) -> dict[str, Any]:
    endpoints = run / "hop-endpoints.yaml"
    backend = FakeBackend(run, "hop", delay_ms=0)
    endpoints_file.write(endpoints, {"triton": [backend.endpoint()]})
    eds = EdsProcess(run, endpoints, ["triton"])
    envoy = EnvoyProcess(run, envoy_params(eds.port, ["triton"]), "hop-envoy")
    try:
        await backend.start_ready()
        await eds.start_ready()
        await envoy.start_ready()
        await envoy_admin.wait_routable(envoy.admin, "triton", "127.0.0.1", backend.port)
        direct = await timed(backend.address, requests)
        via = await timed(envoy.listener("triton"), requests)
    finally:
        await envoy.stop()
        await eds.stop()
        await backend.stop()
    return {
        "requests": requests,
        "direct_p50_ms": round(direct[0], 3),
        "direct_p99_ms": round(direct[1], 3),
        "envoy_p50_ms": round(via[0], 3),
        "envoy_p99_ms": round(via[1], 3),
        "added_p50_ms": round(via[0] - direct[0], 3),
        "added_p99_ms": round(via[1] - direct[1], 3),
    }


# -- 3. one change to many ADS clients ----------------------------------------------------------


async def ads_clients(target: str, clients: int, api: str) -> None:
    """The worker process: ``clients`` ADS streams, each on its own connection, ACKing all."""

    async def one(i: int) -> None:
        options = [("grpc.use_local_subchannel_pool", 1), ("grpc.max_receive_message_length", -1)]
        async with grpc.aio.insecure_channel(target, options=options) as channel:
            node = Node(id=f"bench-{i}")
            if api == "sotw":
                call = channel.stream_stream(
                    ADS + "StreamAggregatedResources",
                    request_serializer=bytes,
                    response_deserializer=DiscoveryResponse.parse,
                )()
                await call.write(
                    DiscoveryRequest(node=node, type_url=ENDPOINTS, resource_names=["bench"])
                )
                async for response in call:
                    await call.write(
                        DiscoveryRequest(
                            type_url=ENDPOINTS,
                            resource_names=["bench"],
                            version_info=response.version_info,
                            response_nonce=response.nonce,
                        )
                    )
            else:
                call = channel.stream_stream(
                    ADS + "DeltaAggregatedResources",
                    request_serializer=bytes,
                    response_deserializer=DeltaDiscoveryResponse.parse,
                )()
                await call.write(
                    DeltaDiscoveryRequest(
                        node=node, type_url=ENDPOINTS, resource_names_subscribe=["bench"]
                    )
                )
                async for response in call:
                    await call.write(
                        DeltaDiscoveryRequest(type_url=ENDPOINTS, response_nonce=response.nonce)
                    )

    await asyncio.gather(*(one(i) for i in range(clients)), return_exceptions=True)


class AckWatch:
    """Collects ACKs per version (observer of the in-process server)."""

    def __init__(self) -> None:
        self.acks: dict[str, list[float]] = {}

    def __call__(self, event: StreamEvent) -> None:
        if event.kind is Kind.ACK:
            self.acks.setdefault(event.version, []).append(time.monotonic())

    def last_of(self, count: int) -> float:
        """When the last ACK came of a version that ``count`` clients have ACKed; 0 while none
        has."""
        return next((max(t) for t in self.acks.values() if len(t) >= count), 0.0)

    async def until(self, count: int, timeout_s: float) -> float:
        """Wait until one version has ``count`` ACKs; the time of the last one (as recorded
        when it came, so the wait's polling does not add to it)."""
        what = f"a version ACKed by {count} clients"
        return await wait_for_state(lambda: self.last_of(count), timeout_s, what)


async def fanout(clients: int, size: int, api: str) -> float:
    endpoints = [Endpoint(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", 8001) for i in range(size)]
    cache = EndpointCache(["bench"])
    cache.set_cluster("bench", endpoints)
    cache.mark_ready()
    watch = AckWatch()
    xds = XdsServer(SnapshotBuilder(cache), [watch])
    server = grpc.aio.server(options=[("grpc.max_send_message_length", -1)])
    xds.register(server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.bench_eds", "--ads-worker", f"127.0.0.1:{port}",
        "--clients", str(clients), "--api", api, cwd=ROOT,
    )  # fmt: skip
    try:
        await watch.until(clients, 60)  # everyone holds the first version
        watch.acks.clear()
        start = time.monotonic()
        changed = [Endpoint(endpoints[0].address, 8001, Health.DRAINING), *endpoints[1:]]
        cache.set_cluster("bench", changed)
        last = await watch.until(clients, 30)
        return last - start
    finally:
        worker.kill()
        await worker.wait()
        xds.close()
        await server.stop(0)


# -- main ---------------------------------------------------------------------------------------


async def bench(args: argparse.Namespace) -> dict[str, Any]:
    run = Path(tempfile.mkdtemp(prefix="inferline-bench-eds-"))
    console.print(f"processes and logs in {run}")
    console.print(f"1/3 convergence: {args.events} scale-ups under load …")
    scaling = await convergence(run, args.events, args.concurrency)
    console.print(f"2/3 the Envoy hop: {args.latency_requests} sequential requests each way …")
    hop_latency = await hop(run, args.latency_requests)
    console.print(f"3/3 one change to {args.clients} ADS clients x {args.endpoints} endpoints …")
    push = {
        "clients": args.clients,
        "endpoints": args.endpoints,
        "sotw_s": round(await fanout(args.clients, args.endpoints, "sotw"), 3),
        "delta_s": round(await fanout(args.clients, args.endpoints, "delta"), 3),
    }
    met = {
        "convergence_p99_ms": scaling["p99_ms"] <= GOALS["convergence_p99_ms"],
        "hop_added_p50_ms": hop_latency["added_p50_ms"] <= GOALS["hop_added_p50_ms"],
        "fanout_s": max(push["sotw_s"], push["delta_s"]) <= GOALS["fanout_s"],
        "failed": scaling["failed_requests"] <= GOALS["failed"],
    }
    return {
        "convergence": scaling,
        "hop_latency": hop_latency,
        "ads_push": push,
        "failed_requests": scaling["failed_requests"],
        "goals": GOALS,
        "goals_met": met,
        "backend": "inferline_testing.fake_backend: KServe v2, 2 ms simulated work, no model "
        "(simulated)",
        "concurrency": args.concurrency,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }


def table(result: dict[str, Any]) -> Table:
    out = Table(title="inferline control plane + Envoy (simulated backends)")
    for column in ("measure", "value", "goal", "met"):
        out.add_column(column, justify="right" if column != "measure" else "left")
    c, h, p, met = (
        result["convergence"],
        result["hop_latency"],
        result["ads_push"],
        result["goals_met"],
    )

    def ok(key: str) -> str:
        return "[green]yes[/]" if met[key] else "[red]no[/]"

    out.add_row("convergence p50 (ready → first request)", f"{c['p50_ms']} ms", "", "")
    out.add_row(
        f"convergence p99 over {c['events']} scale-ups",
        f"{c['p99_ms']} ms",
        "≤ 1000 ms",
        ok("convergence_p99_ms"),
    )
    out.add_row("direct p50 / p99", f"{h['direct_p50_ms']} / {h['direct_p99_ms']} ms", "", "")
    out.add_row("through Envoy p50 / p99", f"{h['envoy_p50_ms']} / {h['envoy_p99_ms']} ms", "", "")
    out.add_row(
        "added by the Envoy hop p50", f"{h['added_p50_ms']} ms", "≤ 0.5 ms", ok("hop_added_p50_ms")
    )
    out.add_row("added by the Envoy hop p99", f"{h['added_p99_ms']} ms", "", "")
    out.add_row(
        f"one change → last ACK, {p['clients']} clients x {p['endpoints']} endpoints, SotW",
        f"{p['sotw_s']} s",
        "≤ 1 s",
        ok("fanout_s"),
    )
    out.add_row("… delta", f"{p['delta_s']} s", "≤ 1 s", ok("fanout_s"))
    out.add_row(
        f"failed requests over {c['requests']} (scaling)",
        str(c["failed_requests"]),
        "0",
        ok("failed"),
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=20, help="scale-ups to measure")
    parser.add_argument("--concurrency", type=int, default=8, help="demo client load")
    parser.add_argument("--latency-requests", type=int, default=3000)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--endpoints", type=int, default=1000)
    parser.add_argument("--ads-worker", metavar="TARGET", help=argparse.SUPPRESS)
    parser.add_argument("--api", default="sotw", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ads_worker:
        asyncio.run(ads_clients(args.ads_worker, args.clients, args.api))
        return
    result = asyncio.run(bench(args))
    console.print(table(result))
    console.print(f"wrote {write_result('eds', result)}")


if __name__ == "__main__":
    sys.exit(run_main(main))
