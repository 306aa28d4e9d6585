"""The GPU pod's client of its own Triton, against a fake Triton over real gRPC (port 0)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import pytest_asyncio
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from inferline.errors import InferError
from preprocess.local_triton import LocalTriton
from preprocess.shm import SharedMemoryRing

MODEL = "classifier_model"


class FakeTriton(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Serves MODEL's configuration; answers every inference NOT_FOUND, as Triton does for a
    model it has dropped (its backend died)."""

    async def ModelConfig(self, request: Any, context: Any) -> Any:
        config = model_config_pb2.ModelConfig(name=request.name, max_batch_size=8)
        config.input.add(name="INPUT", data_type=model_config_pb2.TYPE_UINT8, dims=[3, 4, 4])
        return service_pb2.ModelConfigResponse(config=config)

    async def SystemSharedMemoryRegister(self, request: Any, context: Any) -> Any:
        return service_pb2.SystemSharedMemoryRegisterResponse()

    async def SystemSharedMemoryUnregister(self, request: Any, context: Any) -> Any:
        return service_pb2.SystemSharedMemoryUnregisterResponse()

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        await context.abort(
            grpc.StatusCode.NOT_FOUND,
            f"Request for unknown model: '{request.model_name}' has no available versions",
        )


@pytest_asyncio.fixture
async def triton(tmp_path: Path) -> AsyncIterator[LocalTriton]:
    server = grpc.aio.server()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(FakeTriton(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    ring = SharedMemoryRing(f"test-{tmp_path.name}", 1, 4096, directory=tmp_path)
    client = LocalTriton(f"127.0.0.1:{port}", "", ring)
    yield client
    await client.close()
    ring.close()
    await server.stop(None)


def request(model: str) -> service_pb2.ModelInferRequest:
    return service_pb2.ModelInferRequest(model_name=model)


async def test_a_model_it_served_that_triton_dropped_is_unavailable_to_retry_elsewhere(
    triton: LocalTriton,
) -> None:
    spec = await triton.spec(MODEL, "", 5.0)  # the pod has served it
    assert (spec.input, spec.height, spec.width, spec.max_batch) == ("INPUT", 4, 4, 8)
    with pytest.raises(InferError) as raised:
        await triton.infer(request(MODEL), triton.ring.slots[0], 5.0)
    assert raised.value.code == grpc.StatusCode.UNAVAILABLE  # the leaf hop retries it
    assert f"no longer serves model {MODEL!r}" in raised.value.message
    assert "has no available versions" in raised.value.message


async def test_a_model_it_never_served_stays_not_found(triton: LocalTriton) -> None:
    with pytest.raises(InferError) as raised:
        await triton.infer(request("never_heard_of"), triton.ring.slots[0], 5.0)
    assert raised.value.code == grpc.StatusCode.NOT_FOUND  # the caller's mistake, said as such
