"""Per-RPC metrics on a real gRPC server: requests by method, model and status, duration,
requests in flight, and the bytes each way as on the wire."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest
from prometheus_client import REGISTRY
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferline import kserve
from inferline.errors import grpc_boundary, grpc_stream_boundary
from inferline.server import RunningServer, start_server
from inferline.servicer import Context, KServeServicer
from inferline_testing.waits import wait_for_state

SERVICE = "metricsunit"  # its own collectors: inferline_metricsunit_grpc_*
PREFIX = f"inferline_{SERVICE}_grpc"
WAIT_S = 30.0


class Echo(KServeServicer):
    """Model ``echo``: returns its input as output ``OUT``; ``hold`` keeps calls waiting."""

    server_name = "unit"
    models = ("echo",)

    def __init__(self) -> None:
        self.hold = asyncio.Event()
        self.hold.set()

    @grpc_boundary
    async def ModelInfer(
        self, request: service_pb2.ModelInferRequest, context: Context
    ) -> service_pb2.ModelInferResponse:
        self.check_model(request.model_name, request.model_version)
        await self.hold.wait()
        return self._echo(request)

    @grpc_stream_boundary
    async def ModelStreamInfer(
        self, requests: AsyncIterator[service_pb2.ModelInferRequest], context: Context
    ) -> AsyncIterator[service_pb2.ModelStreamInferResponse]:
        async for request in requests:
            self.check_model(request.model_name, request.model_version)
            yield service_pb2.ModelStreamInferResponse(infer_response=self._echo(request))

    @staticmethod
    def _echo(request: service_pb2.ModelInferRequest) -> service_pb2.ModelInferResponse:
        response = service_pb2.ModelInferResponse(model_name=request.model_name, id=request.id)
        kserve.add_output(response, "OUT", np.frombuffer(request.raw_input_contents[0], np.uint8))
        return response


EchoServer = tuple[Echo, Any]  # the servicer, and a GRPCInferenceServiceStub on its port


@pytest.fixture
async def echo() -> AsyncIterator[EchoServer]:
    servicer = Echo()
    running: RunningServer = await start_server(
        SERVICE,
        0,
        [lambda s: service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, s)],
        ["inference.GRPCInferenceService"],
        host="127.0.0.1",
    )
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        yield servicer, service_pb2_grpc.GRPCInferenceServiceStub(channel)
    await running.stop(0)


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(f"{PREFIX}_{name}", labels) or 0.0


def infer_request(model: str, payload: bytes) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name=model, id="r")
    request.inputs.add(name="IN", datatype="UINT8", shape=[len(payload)])
    request.raw_input_contents.append(payload)
    return request


async def test_a_call_is_counted_timed_and_measured_by_model(echo: EchoServer) -> None:
    _, stub = echo
    labels = {"method": "ModelInfer", "model": "echo"}
    before = {
        "ok": sample("requests_total", code="OK", **labels),
        "timed": sample("request_duration_seconds_count", **labels),
        "in": sample("received_bytes_total", **labels),
        "out": sample("sent_bytes_total", **labels),
    }
    request = infer_request("echo", bytes(range(200)) * 5)
    response = await stub.ModelInfer(request)
    assert sample("requests_total", code="OK", **labels) == before["ok"] + 1
    assert sample("request_duration_seconds_count", **labels) == before["timed"] + 1
    # Exactly the messages' sizes on the wire, each way.
    assert sample("received_bytes_total", **labels) == before["in"] + request.ByteSize()
    assert sample("sent_bytes_total", **labels) == before["out"] + response.ByteSize()


async def test_an_unknown_model_is_counted_without_its_name(echo: EchoServer) -> None:
    _, stub = echo
    before = sample("requests_total", method="ModelInfer", model="", code="NOT_FOUND")
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await stub.ModelInfer(infer_request("made-up-name", b"x"))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND
    # An aborted call's status can reach the client a moment before the server's counter moves.
    await wait_for_state(
        lambda: (
            sample("requests_total", method="ModelInfer", model="", code="NOT_FOUND") == before + 1
        ),
        WAIT_S,
        "the NOT_FOUND counted once, without the model's name",
    )
    series = {s.labels.get("model") for m in REGISTRY.collect() for s in m.samples}
    assert "made-up-name" not in series  # a client cannot mint label values


async def test_requests_in_flight_rise_and_fall(echo: EchoServer) -> None:
    servicer, stub = echo
    servicer.hold.clear()
    before = sample("inflight_requests", method="ModelInfer")
    calls = [asyncio.ensure_future(stub.ModelInfer(infer_request("echo", b"y"))) for _ in range(3)]
    await wait_for_state(
        lambda: sample("inflight_requests", method="ModelInfer") == before + 3, WAIT_S, "3 held"
    )
    servicer.hold.set()
    await asyncio.gather(*calls)
    assert sample("inflight_requests", method="ModelInfer") == before


async def test_a_stream_counts_every_message_each_way(echo: EchoServer) -> None:
    _, stub = echo
    labels = {"method": "ModelStreamInfer", "model": "echo"}
    before_in = sample("received_bytes_total", **labels)
    before_out = sample("sent_bytes_total", **labels)
    before_ok = sample("requests_total", code="OK", **labels)
    requests = [infer_request("echo", bytes([i]) * (100 * (i + 1))) for i in range(3)]

    async def send() -> AsyncIterator[service_pb2.ModelInferRequest]:
        for request in requests:
            yield request

    responses = [r async for r in stub.ModelStreamInfer(send())]
    assert len(responses) == 3
    assert sample("received_bytes_total", **labels) == before_in + sum(
        r.ByteSize() for r in requests
    )
    assert sample("sent_bytes_total", **labels) == before_out + sum(r.ByteSize() for r in responses)
    assert sample("requests_total", code="OK", **labels) == before_ok + 1  # one call
