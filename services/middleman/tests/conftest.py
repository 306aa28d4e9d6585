"""Fixtures: fake KServe v2 upstreams we control, and middleman in front of them, on port 0.

A :class:`FakeUpstream` answers model ``preprocess`` as the preprocess service does (``TENSOR``
zeros and ``ERRORS``, one message per refused image), ``preprocess_video`` with a frame per
request it receives (so a test sees frames come back while it still sends), and the Triton
model as Triton does (``PROBS``: its own fixed distribution for every image). It records every
call and the time left on its deadline, can hold calls at a gate, and fails the next calls with
chosen codes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest
import pytest_asyncio
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferline import kserve
from inferline.imaging.decode import Geometry
from inferline_testing import requests as built
from middleman import app
from middleman.classifiers import Classifier
from middleman.config import Config

TRITON_MODEL, TRITON_INPUT, TRITON_OUTPUT = "fake_classifier", "INPUT", "PROBS"
CLASSES = 1000
CROP = 224
GEOMETRY = Geometry(256, CROP)
CLASSIFIER = Classifier(
    TRITON_MODEL, TRITON_INPUT, TRITON_OUTPUT, GEOMETRY, tuple(f"class {i}" for i in range(CLASSES))
)
REFUSED = b"REFUSE"  # the fake preprocess refuses an image that starts with this
REFUSAL = "the fake preprocess refuses it"
# A deadline arrives a little coarser than it was set: gRPC rounds a timeout up to a few
# significant digits of its grpc-timeout header (60 s was seen to arrive as 60.2 s).
ROUNDING_S = 0.1
ROUNDING_RATIO = 0.01


def carries_deadline(time_left: float | None, at_most: float) -> bool:
    """Whether a call that arrived with ``time_left`` had a deadline of about ``at_most``."""
    slack = ROUNDING_S + ROUNDING_RATIO * at_most
    return time_left is not None and 0 < time_left <= at_most + slack


class FakeUpstream(service_pb2_grpc.GRPCInferenceServiceServicer):
    def __init__(self, seed: int = 0) -> None:
        self.calls: list[service_pb2.ModelInferRequest] = []
        self.streamed: list[service_pb2.ModelInferRequest] = []  # ModelStreamInfer's requests
        self.time_left: list[float | None] = []
        self.failures: list[grpc.StatusCode] = []
        self.gate = asyncio.Event()
        self.gate.set()
        # of the tensors models preprocess and preprocess_video return; None: as asked
        self.crop: int | None = None
        # Triton's models: name -> (crop, classes)
        self.models: dict[str, tuple[int, int]] = {TRITON_MODEL: (CROP, CLASSES)}
        self.rng = np.random.default_rng(seed)
        self.probabilities: npt.NDArray[np.float32] = self.distribution(CLASSES)

    def distribution(self, classes: int) -> npt.NDArray[np.float32]:
        return self.rng.dirichlet(np.ones(classes)).astype(np.float32)

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        self.calls.append(request)
        self.time_left.append(context.time_remaining())
        await self.gate.wait()
        if self.failures:
            code = self.failures.pop(0)
            await context.abort(code, f"fake upstream says {code.name}")
        if request.model_name == "preprocess":
            return self._preprocess(request)
        if request.model_name in self.models:
            return await self._classify(request, context)
        await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model {request.model_name!r}")

    def _preprocess(self, request: Any) -> Any:
        items = kserve.find_input(request, "IMAGE", "BYTES", "encoded images")
        response = service_pb2.ModelInferResponse(model_name="preprocess", id=request.id)
        crop = self.crop or int(kserve.parameters(request).get("crop", CROP))
        shape = (len(items), 3, crop, crop)
        kserve.add_output(response, "TENSOR", np.zeros(shape, np.uint8))
        errors = [REFUSAL.encode() if bytes(i).startswith(REFUSED) else b"" for i in items]
        kserve.add_output(response, "ERRORS", np.array(errors, dtype=np.object_))
        return response

    async def _classify(self, request: Any, context: Any) -> Any:
        (tensor,) = request.inputs
        crop, classes = self.models[request.model_name]
        expected = (TRITON_INPUT, "UINT8", [3, crop, crop])
        if (tensor.name, tensor.datatype, list(tensor.shape[1:])) != expected:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unexpected input {tensor}")
        row = self.probabilities if classes == CLASSES else self.distribution(classes)
        rows = np.tile(row, (tensor.shape[0], 1))
        response = service_pb2.ModelInferResponse(model_name=request.model_name, id=request.id)
        kserve.add_output(response, TRITON_OUTPUT, rows)
        return response

    async def ModelStreamInfer(self, requests: Any, context: Any) -> Any:
        """``preprocess_video``: for each request (a whole video, or a chunk of one), one frame
        whose FRAME_INDEX counts the requests of its video; after a whole video or the chunk
        with sequence_end, the final response."""
        index, crop = 0, CROP
        async for request in requests:
            self.streamed.append(request)
            if index == 0:
                crop = self.crop or int(kserve.parameters(request).get("crop", CROP))
            params = request.parameters
            end = "sequence_end" not in params or params["sequence_end"].bool_param
            yield self._frames(request, [index], crop, final=False)
            index += 1
            if end:
                yield self._frames(request, [], crop, final=True)
                index = 0

    @staticmethod
    def _frames(request: Any, indices: list[int], crop: int, final: bool) -> Any:
        response = service_pb2.ModelInferResponse(model_name="preprocess_video", id=request.id)
        kserve.add_output(response, "TENSOR", np.zeros((len(indices), 3, crop, crop), np.uint8))
        kserve.add_output(response, "FRAME_INDEX", np.array(indices, np.int64))
        kserve.add_output(response, "TIMESTAMP", np.array(indices, np.float64) / 10)
        response.parameters["triton_final_response"].bool_param = final
        return service_pb2.ModelStreamInferResponse(infer_response=response)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerReadyResponse(ready=True)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        return service_pb2.ModelReadyResponse(ready=request.name in ("preprocess", *self.models))


@dataclass
class Fake:
    servicer: FakeUpstream
    url: str


@pytest_asyncio.fixture
async def make_fake() -> AsyncIterator[Callable[[], Awaitable[Fake]]]:
    """``await make_fake()``: a fresh fake upstream serving on a free port."""
    servers: list[grpc.aio.Server] = []
    fakes: list[FakeUpstream] = []

    async def make() -> Fake:
        fake = FakeUpstream(seed=len(fakes))
        server = grpc.aio.server()
        service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(fake, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        fakes.append(fake)
        return Fake(fake, f"127.0.0.1:{port}")

    yield make
    for fake in fakes:
        fake.gate.set()  # let held calls finish
    for server in servers:
        await server.stop(None)


@pytest_asyncio.fixture
async def fake_triton(make_fake: Callable[[], Awaitable[Fake]]) -> Fake:
    return await make_fake()


@pytest_asyncio.fixture
async def fake_preprocess(make_fake: Callable[[], Awaitable[Fake]]) -> Fake:
    return await make_fake()


BASE = Config(
    host="127.0.0.1",
    port=0,
    rest_port=0,
    metrics_port=0,
    triton_model=TRITON_MODEL,
    triton_input=TRITON_INPUT,
    triton_output=TRITON_OUTPUT,
    max_batch=4,
    upstream_timeout_s=10.0,
)

MakeMiddleman = Callable[..., Awaitable[str]]
StartMiddleman = Callable[..., Awaitable[app.Middleman]]


@pytest_asyncio.fixture
async def start_middleman(
    fake_triton: Fake, fake_preprocess: Fake
) -> AsyncIterator[StartMiddleman]:
    """``await start_middleman(**config)``: middleman (gRPC and REST on port 0) in front of the
    two fakes (decoding at ``fake_preprocess``, inference at ``fake_triton``)."""
    running: list[app.Middleman] = []

    async def start(**overrides: Any) -> app.Middleman:
        urls = {"triton_url": fake_triton.url, "preprocess_url": fake_preprocess.url}
        middleman = await app.start(replace(BASE, **{**urls, **overrides}))
        running.append(middleman)
        return middleman

    yield start
    for fake in (fake_triton, fake_preprocess):
        fake.servicer.gate.set()
    for middleman in running:
        await middleman.stop(0)


@pytest_asyncio.fixture
async def make_middleman(start_middleman: StartMiddleman) -> MakeMiddleman:
    """``await make_middleman(**config)``: :func:`start_middleman`'s gRPC address."""

    async def make(**overrides: Any) -> str:
        return f"127.0.0.1:{(await start_middleman(**overrides)).port}"

    return make


def bytes_request(
    items: list[bytes],
    name: str = "IMAGE",
    shape: list[int] | None = None,
    model: str = "classifier",
) -> service_pb2.ModelInferRequest:
    """A ModelInferRequest with one BYTES input, Triton's length-prefixed raw encoding."""
    return built.bytes_request(items, model, name, shape, request_id="request-1")


async def call(
    url: str, request: service_pb2.ModelInferRequest, deadline_s: float | None = None
) -> service_pb2.ModelInferResponse:
    """``ModelInfer`` on ``url`` over a channel of its own."""
    async with grpc.aio.insecure_channel(url) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        return await stub.ModelInfer(request, timeout=deadline_s)


async def rpc_error(url: str, request: service_pb2.ModelInferRequest) -> grpc.aio.AioRpcError:
    """The error ``request`` is answered with (the test fails if it succeeds)."""
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(url, request)
    return caught.value
