"""Fixtures: a fake KServe v2 upstream we control and the batcher in front of it, on port 0.

The fake is an identity model ("echo"): every input comes back as an output of the same name,
so each caller can check it got its own slice. It records every call, can hold calls at a gate,
fail the next calls with chosen codes, and refuses any batch holding a poisoned item.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import grpc
import pytest_asyncio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from batcher import app
from batcher.config import Config
from batcher.service import BatcherService
from inferline_testing import requests as built

WAIT_S = 30.0  # generous: only bounds how long a broken run takes to fail
POISON = b"POISON"  # an item starting with this fails its whole batch upstream
MODELS = {"echo": 8, "echo2": 8, "plain": 0}  # model -> max_batch_size in its config


class FakeUpstream(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self) -> None:
        self.calls: list[service_pb2.ModelInferRequest] = []
        self.time_left: list[float | None] = []
        self.metadata: list[dict[str, str]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.failures: list[grpc.StatusCode] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.cancelled = 0
        self._arrived = asyncio.Condition()
        # One GPU: calls run one at a time, each taking ``gpu_s`` plus ``item_s`` per item
        # (None: at once, concurrently); ``gpus``: as many GPUs as calls, each call at once.
        self.gpu_s: float | None = None
        self.item_s = 0.0
        self.gpus = False
        self._gpu = asyncio.Lock()

    async def wait_calls(self, count: int) -> None:
        """Until ``count`` ModelInfer calls have arrived (an event, not a sleep)."""
        async with asyncio.timeout(WAIT_S), self._arrived:
            await self._arrived.wait_for(lambda: len(self.calls) >= count)

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        self.calls.append(request)
        self.time_left.append(context.time_remaining())
        self.metadata.append({k: v for k, v in context.invocation_metadata() or ()})
        async with self._arrived:
            self._arrived.notify_all()
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.gate.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.in_flight -= 1
        if self.gpu_s is not None:
            took = self.gpu_s + self.item_s * (request.inputs[0].shape[0] if request.inputs else 0)
            async with contextlib.nullcontext() if self.gpus else self._gpu:
                await asyncio.sleep(took)  # the model's own time, not a readiness wait
        if self.failures:
            code = self.failures.pop(0)
            await context.abort(code, f"fake upstream says {code.name}")
        if request.model_name not in MODELS:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model {request.model_name}")
        if any(POISON in bytes(raw) for raw in request.raw_input_contents):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "an item is poisoned")
        return echo(request)

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        self.metadata.append({k: v for k, v in context.invocation_metadata() or ()})
        if request.name not in MODELS:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model {request.name}")
        config = model_config_pb2.ModelConfig(
            name=request.name, max_batch_size=MODELS[request.name]
        )
        return service_pb2.ModelConfigResponse(config=config)

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        if request.name not in MODELS:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model {request.name}")
        return service_pb2.ModelMetadataResponse(name=request.name, platform="fake")

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerReadyResponse(ready=True)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        return service_pb2.ModelReadyResponse(ready=request.name in MODELS)

    async def ServerMetadata(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerMetadataResponse(name="fake-upstream", version="1")

    async def ModelStreamInfer(self, requests: Any, context: Any) -> AsyncIterator[Any]:
        async for request in requests:
            yield service_pb2.ModelStreamInferResponse(infer_response=echo(request))


def echo(request: Any) -> Any:
    response = service_pb2.ModelInferResponse(
        model_name=request.model_name, model_version="1", id=request.id
    )
    for index, tensor in enumerate(request.inputs):
        response.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        response.raw_output_contents.append(request.raw_input_contents[index])
    return response


def infer_request(
    tag: bytes, items: int = 1, model: str = "echo", width: int = 8, request_id: str = ""
) -> Any:
    """A UINT8 [items, width] request whose every item starts with ``tag`` (padded)."""
    item = (tag + b"." * width)[:width]
    request = service_pb2.ModelInferRequest(model_name=model, id=request_id or tag.decode())
    request.inputs.add(name="INPUT", datatype="UINT8", shape=[items, width])
    request.raw_input_contents.append(item * items)
    return request


def bytes_request(items: list[bytes], request_id: str) -> Any:
    return built.bytes_request(items, "echo", "TEXT", request_id=request_id)


def metric(name: str, model: str = "echo") -> float:
    return REGISTRY.get_sample_value(name, {"model": model}) or 0.0


async def serve(register: Callable[[grpc.aio.Server], None]) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    register(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    return server, port


async def wait_serving(url: str) -> None:
    """Until the gRPC health service at ``url`` says SERVING (waits on the RPC itself)."""
    async with grpc.aio.insecure_channel(url) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = await stub.Check(
            health_pb2.HealthCheckRequest(), wait_for_ready=True, timeout=WAIT_S
        )
        assert response.status == health_pb2.HealthCheckResponse.SERVING


@dataclass
class Harness:
    """The batcher in front of the fake; ``stub`` talks to the batcher."""

    fake: FakeUpstream
    service: BatcherService
    url: str
    channel: grpc.aio.Channel
    stub: Any

    async def infer(self, request: Any, deadline_s: float | None = 10.0) -> Any:
        return await self.stub.ModelInfer(request, timeout=deadline_s)

    def queued(self, model: str = "echo") -> int:
        batcher = self.service.batchers._batchers.get((model, ""))
        return 0 if batcher is None else len(batcher.queue)


BASE = Config(
    host="127.0.0.1",
    port=0,
    metrics_port=0,
    max_queue_delay_ms=50.0,
    max_queue=64,
    max_inflight=2,
    adaptive_inflight=False,  # fixed slots, as each test counts them (one test turns it on)
    upstream_timeout_s=10.0,
)

MakeHarness = Callable[..., Awaitable[Harness]]


@pytest_asyncio.fixture
async def make_harness() -> AsyncIterator[MakeHarness]:
    """``await make_harness(max_queue=2, ...)``: a fresh fake and batcher with those settings."""
    cleanups: list[Callable[[], Awaitable[None]]] = []

    async def make(**overrides: Any) -> Harness:
        fake = FakeUpstream()
        upstream_server, upstream_port = await serve(
            lambda s: service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(fake, s)
        )
        cleanups.append(lambda: upstream_server.stop(None))
        config = replace(BASE, **{"upstream_url": f"127.0.0.1:{upstream_port}", **overrides})
        service = app.build(config)
        server, port = await serve(lambda s: s.add_generic_rpc_handlers((service.handler(),)))

        async def stop() -> None:
            await server.stop(None)
            await service.batchers.close()
            await service.upstream.close()

        cleanups.append(stop)
        url = f"127.0.0.1:{port}"
        await wait_serving(url)
        channel = grpc.aio.insecure_channel(url)
        cleanups.append(channel.close)
        return Harness(
            fake, service, url, channel, service_pb2_grpc.GRPCInferenceServiceStub(channel)
        )

    yield make
    for cleanup in reversed(cleanups):
        await cleanup()
