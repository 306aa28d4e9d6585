"""Shedding at the front door: once middleman says it is saturated, Envoy refuses a share of new
requests itself, before they reach a Python process, in the words a client can act on.

The real Envoy, rendered from the template, its public listener's gRPC cluster fed by the control
plane with one fake backend (``python -m inferline_testing.fake_backend``, with
``--fail resource_exhausted``: a middleman that refuses everything for load), and its REST cluster
with a small aiohttp server that answers KServe's 429 the same way. The fake backend counts what
reaches it; Envoy's admission control counts what it refused.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
import pytest
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from eds.cache import Endpoint, Health
from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin
from inferline_envoy.params import SHED_MESSAGE
from inferline_stack import scaling
from inferline_testing.harness import EdsProcess, EnvoyProcess, FakeBackend, envoy_params
from inferline_testing.ports import free_port
from inferline_testing.requests import bytes_request

pytestmark = pytest.mark.e2e

WAIT_S = 30.0
SATURATED = "middleman says: saturated"  # the REST stand-in's words


@dataclass
class FrontDoor:
    envoy: EnvoyProcess
    middleman: FakeBackend
    rest_port: int

    async def shed(self) -> int:
        """Requests Envoy's admission control refused so far."""
        stats = await envoy_admin.stats(self.envoy.admin, r"admission_control\.rq_rejected$")
        return sum(int(v) for v in stats.values())


async def saturated_rest(request: web.Request) -> web.Response:
    await request.read()
    return web.json_response({"error": SATURATED}, status=429)


async def ready_rest(request: web.Request) -> web.Response:
    return web.Response(status=200)


@asynccontextmanager
async def front_door(tmp_path: Path, shed: bool = True) -> AsyncIterator[FrontDoor]:
    app = web.Application()
    app.router.add_post("/v2/models/{model}/infer", saturated_rest)
    app.router.add_get("/v2/health/live", ready_rest)
    runner = web.AppRunner(app)
    await runner.setup()
    rest_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", rest_port).start()
    endpoints = tmp_path / "endpoints.yaml"
    clusters = ["middleman", "middleman-rest"]
    endpoints_file.write(endpoints, {c: [] for c in clusters})
    eds = EdsProcess(tmp_path, endpoints, clusters)
    await eds.start_ready()
    params = envoy_params(eds.port, ["middleman"], rest=(("middleman", "middleman-rest"),),
                          shed=shed)  # fmt: skip
    envoy = EnvoyProcess(tmp_path, params)
    middleman = FakeBackend(tmp_path, "middleman-0", 1.0, "resource_exhausted")
    processes = [eds, envoy, middleman]
    try:
        await asyncio.gather(envoy.start_ready(), middleman.start_ready())
        rest = Endpoint("127.0.0.1", rest_port, Health.HEALTHY, 1, "local", "middleman-0")
        members = [("middleman", middleman.endpoint()), ("middleman-rest", rest)]
        assert await scaling.announce(endpoints, members, envoy.admin, WAIT_S) is not None
        yield FrontDoor(envoy, middleman, rest_port)
    finally:
        for p in processes:  # shown when a test fails
            print(f"--- {p.name}\n{p.tail(10)}")
        await asyncio.gather(*(p.stop(2.0) for p in reversed(processes)))
        await runner.cleanup()


def image_request(i: int) -> service_pb2.ModelInferRequest:
    return bytes_request([f"image {i}".encode()], shape=[1, 1], request_id=str(i))


async def grpc_calls(target: str, count: int, concurrency: int = 8) -> Counter[tuple[str, str]]:
    """``count`` requests from ``concurrency`` callers: (status, message) counts."""
    seen: Counter[tuple[str, str]] = Counter()
    async with grpc.aio.insecure_channel(target) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

        async def caller(n: int) -> None:
            for i in range(n, count, concurrency):
                try:
                    await stub.ModelInfer(image_request(i), timeout=5.0)
                    seen["OK", ""] += 1
                except grpc.aio.AioRpcError as exc:
                    seen[exc.code().name, exc.details() or ""] += 1

        await asyncio.gather(*(caller(n) for n in range(concurrency)))
    return seen


async def test_envoy_sheds_what_a_saturated_middleman_would_refuse_before_it_gets_there(
    tmp_path: Path,
) -> None:
    async with front_door(tmp_path) as door:
        seen = await grpc_calls(door.envoy.listener("middleman"), 400)
        reached, _ = await door.middleman.stats()
        shed = await door.shed()
        await probes_answered(door.envoy.listener("middleman"))  # while it sheds
        assert await door.shed() == shed
    print(f"{dict(seen)}; {reached} reached middleman, Envoy shed {shed}")
    assert {status for status, _ in seen} == {"RESOURCE_EXHAUSTED"}  # one code, either way
    by_envoy = seen["RESOURCE_EXHAUSTED", SHED_MESSAGE]
    assert by_envoy == shed > 0
    assert reached == 400 - by_envoy  # what Envoy refused never reached middleman
    assert by_envoy > 400 / 2  # most of it, once middleman had said so


async def probes_answered(target: str, rounds: int = 20) -> None:
    """Liveness and readiness, asked ``rounds`` times each, all answered: never shed."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        for _ in range(rounds):
            assert (await stub.ServerLive(service_pb2.ServerLiveRequest(), timeout=5.0)).live
            assert (await stub.ServerReady(service_pb2.ServerReadyRequest(), timeout=5.0)).ready
            checked = await health.Check(health_pb2.HealthCheckRequest(), timeout=5.0)
            assert checked.status == health_pb2.HealthCheckResponse.SERVING


async def test_over_rest_the_shed_are_told_429_in_kserves_words(tmp_path: Path) -> None:
    async with front_door(tmp_path) as door, aiohttp.ClientSession() as session:
        url = f"http://{door.envoy.listener('middleman')}/v2/models/classifier/infer"
        statuses: Counter[tuple[int, str]] = Counter()
        for _ in range(200):
            async with session.post(url, json={"inputs": []}) as response:
                statuses[response.status, json.loads(await response.text())["error"]] += 1
        shed = await door.shed()
        live = f"http://{door.envoy.listener('middleman')}/v2/health/live"
        for _ in range(20):  # while it sheds: never the probes
            async with session.get(live) as response:
                assert response.status == 200
    print(dict(statuses))
    assert set(statuses) == {(429, SATURATED), (429, SHED_MESSAGE)}
    assert statuses[429, SHED_MESSAGE] == shed > 200 / 4


async def test_with_shedding_off_every_refusal_is_middlemans(tmp_path: Path) -> None:
    async with front_door(tmp_path, shed=False) as door:
        seen = await grpc_calls(door.envoy.listener("middleman"), 100)
        reached, _ = await door.middleman.stats()
        shed = await door.shed()
    assert seen.total() == reached == 100  # every request reached middleman ...
    assert {status for status, _ in seen} == {"RESOURCE_EXHAUSTED"}  # ... which refused each
    assert SHED_MESSAGE not in {message for _, message in seen} and shed == 0  # Envoy, none
