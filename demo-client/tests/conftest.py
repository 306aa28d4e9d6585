"""Fixtures: an in-process fake KServe v2 server (port 0) and small image sets."""

from __future__ import annotations

import asyncio
import math
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import cv2
import grpc
import numpy as np
import numpy.typing as npt
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

from demo_client.client import open_clients, wait_ready
from inferline_testing.ports import free_port

MODEL = "classifier"
PIXELS = "pixels"  # takes one raw UINT8 tensor [N, ...], answers PROBS FP32 [N, CLASSES]
VIDEO = "classifier_video"  # streamed: a frame for each chunk received, answered at once
MODELS = (MODEL, VIDEO, PIXELS)
CLASSES = 1000
BAD = b"BAD"  # images starting with this are rejected with INVALID_ARGUMENT
SLOW = b"SLOW"  # images starting with this never get an answer (the client times out)
HOLD = b"HOLD"  # images starting with this are answered once ``release`` is set
# What the pipeline's answers carry (docs/tracing.md): Envoy's entry in the initial metadata, the
# services' in the trailers; every ModelInfer answer of the classifier carries these.
ENVOY_TIMING = "envoy;dur=9"
SERVICES_TIMING = "middleman;dur=8.5, queue;dur=1.5, batch;dur=6, decode;dur=1, infer;dur=4"


def probabilities(image: bytes) -> npt.NDArray[np.float32]:
    """Deterministic pseudo-probabilities for one image."""
    rng = np.random.default_rng(zlib.crc32(image))
    logits = rng.normal(size=CLASSES) * 3.0
    exp = np.exp(logits - logits.max())
    return np.asarray(exp / exp.sum(), dtype=np.float32)


class FakeKServe(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Just enough of KServe v2 for the demo client: readiness and ``ModelInfer`` (whose
    classifier answers carry the pipeline's ``server-timing``)."""

    BAD = BAD
    SLOW = SLOW
    HOLD = HOLD

    def __init__(self) -> None:
        self.infer_calls = 0
        self.infer_seen = asyncio.Event()  # set by every ModelInfer call
        self.never = asyncio.Event()
        self.release = asyncio.Event()  # answers the HOLD images
        self.held = 0  # calls with a HOLD image so far (other tests' stray calls do not count)
        # client address (one per connection) of each call, by its first image, so a test
        # counts only its own calls and never another test's stray ones
        self.peers: dict[bytes, set[str]] = {}
        self.pixels_seen: list[tuple[str, str, tuple[int, ...]]] = []  # (input, datatype, shape)
        self.video_chunks: list[Any] = []  # every ModelStreamInfer request, in order
        self.video_seen = asyncio.Event()  # set by every ModelStreamInfer request
        self.authorization: list[tuple[str, str]] = []  # (method, authorization header) seen
        self.traceparents: list[str] = []  # the traceparent of each ModelInfer call with one

    async def ServerLive(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return service_pb2.ServerReadyResponse(ready=True)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        self.saw_authorization("ModelReady", context)
        return service_pb2.ModelReadyResponse(ready=request.name in MODELS)

    def saw_authorization(self, method: str, context: Any) -> None:
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                self.authorization.append((method, value))

    async def RepositoryIndex(self, request: Any, context: Any) -> Any:
        index = service_pb2.RepositoryIndexResponse.ModelIndex
        return service_pb2.RepositoryIndexResponse(
            models=[index(name=name, version="1", state="READY") for name in MODELS]
        )

    async def ModelInfer(self, req: Any, context: Any) -> Any:
        self.saw_authorization("ModelInfer", context)
        self.traceparents.extend(
            value for key, value in context.invocation_metadata() or () if key == "traceparent"
        )
        self.infer_calls += 1
        self.infer_seen.set()
        if req.model_name == PIXELS:
            return await self.pixels(req, context)
        if req.model_name != MODEL:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown model {req.model_name}")
        names = [i.name for i in req.inputs]
        if names != ["IMAGE"] or req.inputs[0].datatype != "BYTES":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "expected one BYTES input IMAGE")
        images = list(deserialize_bytes_tensor(req.raw_input_contents[0]))
        self.peers.setdefault(images[0] if images else b"", set()).add(context.peer())
        if any(image.startswith(SLOW) for image in images):
            await self.never.wait()
        if any(image.startswith(HOLD) for image in images):
            self.held += 1
            await self.release.wait()
        bad = [i for i, image in enumerate(images) if image.startswith(BAD)]
        if bad:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"image {bad[0]} does not decode")
        probs = np.stack([probabilities(image) for image in images])
        await context.send_initial_metadata((("server-timing", ENVOY_TIMING),))
        context.set_trailing_metadata((("server-timing", SERVICES_TIMING),))
        response = service_pb2.ModelInferResponse(model_name=MODEL, id=req.id)
        outputs = list(req.outputs) or [req.InferRequestedOutputTensor(name="PROBABILITIES")]
        for out in outputs:
            k = (
                out.parameters["classification"].int64_param
                if "classification" in out.parameters
                else 0
            )
            tensor = response.outputs.add(name=out.name)
            if k:
                top = np.argsort(-probs, axis=1)[:, :k]
                entries = np.array(
                    [
                        [f"{probs[n, c]:f}:{c}:class {c}".encode() for c in row]
                        for n, row in enumerate(top)
                    ],
                    dtype=np.object_,
                )
                tensor.datatype = "BYTES"
                tensor.shape.extend([len(images), k])
                response.raw_output_contents.append(serialize_byte_tensor(entries).item())
            else:
                tensor.datatype = "FP32"
                tensor.shape.extend([len(images), CLASSES])
                response.raw_output_contents.append(probs.tobytes())
        return response

    async def ModelStreamInfer(self, requests: Any, context: Any) -> Any:
        """``classifier_video``: for each chunk received, at once, a frame (FRAME_INDEX 10 x the
        chunk's number in its video, TIMESTAMP its number) labelled tabby; the chunk with
        sequence_end (or a video without sequence parameters) gets the final one. A video
        starting with BAD is refused; one starting with SLOW is never answered."""
        index = 0
        async for req in requests:
            self.video_chunks.append(req)
            self.video_seen.set()
            data = bytes(deserialize_bytes_tensor(req.raw_input_contents[0])[0])
            if index == 0 and data.startswith(BAD):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "video: not a video")
            if index == 0 and data.startswith(SLOW):
                await self.never.wait()
            params = req.parameters
            end = "sequence_end" not in params or params["sequence_end"].bool_param
            response = service_pb2.ModelInferResponse(model_name=VIDEO, id=req.id)
            top = np.array([[b"0.900000:281:tabby"]], dtype=np.object_)
            for name, datatype, shape, raw in (
                ("FRAME_INDEX", "INT64", [1], np.array([index * 10], np.int64).tobytes()),
                ("TIMESTAMP", "FP64", [1], np.array([index], np.float64).tobytes()),
                ("PROBABILITIES", "BYTES", [1, 1], serialize_byte_tensor(top).item()),
            ):
                response.outputs.add(name=name, datatype=datatype, shape=shape)
                response.raw_output_contents.append(raw)
            response.parameters["triton_final_response"].bool_param = end
            yield service_pb2.ModelStreamInferResponse(infer_response=response)
            index = 0 if end else index + 1

    async def pixels(self, req: Any, context: Any) -> Any:
        """One raw UINT8 tensor in, ``[N, CLASSES]`` zeros out for each requested output."""
        if len(req.inputs) != 1 or req.inputs[0].datatype != "UINT8":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "expected one UINT8 input")
        tensor = req.inputs[0]
        shape = tuple(int(d) for d in tensor.shape)
        self.pixels_seen.append((tensor.name, tensor.datatype, shape))
        if len(req.raw_input_contents[0]) != math.prod(shape):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "contents do not match shape")
        response = service_pb2.ModelInferResponse(model_name=PIXELS, id=req.id)
        for out in req.outputs:
            response.outputs.add(name=out.name, datatype="FP32", shape=[shape[0], CLASSES])
            response.raw_output_contents.append(np.zeros((shape[0], CLASSES), np.float32).tobytes())
        return response


@pytest.fixture(scope="session")
async def fake() -> AsyncIterator[tuple[str, FakeKServe]]:
    """A fake server on a free port, ready (checked by polling ServerReady/ModelReady)."""
    server = grpc.aio.server()
    servicer = FakeKServe()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    target = f"127.0.0.1:{port}"
    async with open_clients(target) as clients:
        await wait_ready(clients[0], target, MODEL, wait_s=10.0)
    yield target, servicer
    await server.stop(None)


@pytest.fixture
def target(fake: tuple[str, FakeKServe]) -> str:
    return fake[0]


@pytest.fixture
def unused_target() -> str:
    """host:port where nothing listens."""
    return f"127.0.0.1:{free_port()}"


def write_image(path: Path, seed: int) -> Path:
    """A small random JPEG or PNG (by suffix)."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, size=(32, 48, 3), dtype=np.uint8)
    ok, buf = cv2.imencode(path.suffix, image)
    assert ok
    path.write_bytes(buf.tobytes())
    return path


@pytest.fixture
def good_images(tmp_path: Path) -> Path:
    """Three decodable images."""
    directory = tmp_path / "good"
    directory.mkdir()
    for i, name in enumerate(("a.jpg", "b.png", "c.jpg")):
        write_image(directory / name, i)
    return directory


@pytest.fixture
def mixed_images(good_images: Path) -> Path:
    """Three good images and one the server rejects (so 1 request in 4 fails)."""
    (good_images / "d_bad.jpg").write_bytes(BAD + b" not an image")
    return good_images
