"""What the batcher forwards as it comes, over real gRPC: the other KServe RPCs, streams and
custom metadata."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.grpc.aio as triton
from tritonclient.grpc import service_pb2

from .conftest import MakeHarness, infer_request


async def test_pass_through_rpcs(make_harness: MakeHarness) -> None:
    h = await make_harness()
    async with triton.InferenceServerClient(h.url) as client:  # any Triton client works
        assert await client.is_server_live()
        assert await client.is_server_ready()
        assert await client.is_model_ready("echo")
        assert not await client.is_model_ready("nope")
        assert (await client.get_server_metadata()).name == "fake-upstream"
        assert (await client.get_model_metadata("echo")).platform == "fake"
        assert (await client.get_model_config("echo")).config.max_batch_size == 8
        with pytest.raises(Exception, match="unknown model nope"):
            await client.get_model_metadata("nope")
        tensor = triton.InferInput("INPUT", [2, 3], "UINT8")
        tensor.set_data_from_numpy(np.arange(6, dtype=np.uint8).reshape(2, 3))
        result = await client.infer("echo", [tensor], request_id="via-tritonclient")
        assert result.get_response().id == "via-tritonclient"
        np.testing.assert_array_equal(
            result.as_numpy("INPUT"), np.arange(6, dtype=np.uint8).reshape(2, 3)
        )


async def test_streaming_passes_through(make_harness: MakeHarness) -> None:
    h = await make_harness()

    async def requests() -> Any:
        for tag in (b"s1", b"s2"):
            yield infer_request(tag)

    responses = [r async for r in h.stub.ModelStreamInfer(requests(), timeout=10.0)]
    assert [r.infer_response.id for r in responses] == ["s1", "s2"]
    assert h.fake.calls == []  # streams are not batched


async def test_custom_metadata_reaches_the_upstream(make_harness: MakeHarness) -> None:
    h = await make_harness()
    await h.stub.ModelConfig(
        service_pb2.ModelConfigRequest(name="echo"), metadata=(("x-trace", "abc"),), timeout=5.0
    )
    assert h.fake.metadata[-1]["x-trace"] == "abc"
