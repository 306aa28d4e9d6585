"""Through the real Triton server (PyTriton) serving the *simulated* GPU, with the batcher
started as ``python -m batcher`` starts it (health, reflection, RPC metrics)."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import pytest_asyncio
import tritonclient.grpc.aio as triton
from prometheus_client import REGISTRY
from tritonclient.utils import InferenceServerException

from batcher import app
from batcher.config import Config

from .conftest import wait_serving

MODEL = "simulated_gpu"
READY_TIMEOUT_S = 120.0


def free_ports(count: int) -> list[int]:
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


@dataclass
class SimulatedTriton:
    grpc_url: str
    metrics_url: str
    log: Path

    def counters(self) -> dict[str, float]:
        """Triton's own counters for the model: executions, items, compute time."""
        text = urllib.request.urlopen(self.metrics_url, timeout=5).read().decode()
        pattern = rf'^(nv_inference_\w+)\{{model="{MODEL}",version="1"\}} (\S+)$'
        return {m[1]: float(m[2]) for m in re.finditer(pattern, text, re.MULTILINE)}


@pytest.fixture(scope="module")
def simulated_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimulatedTriton]:
    grpc_port, http_port, metrics_port = free_ports(3)
    log = tmp_path_factory.mktemp("simulated") / "triton.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "inferline_models.triton", "--model", MODEL,
             "--address", "127.0.0.1", "--grpc-port", str(grpc_port),
             "--http-port", str(http_port), "--metrics-port", str(metrics_port),
             "--no-dynamic-batching", "--max-batch-size", "16",
             "--simulated-t0-ms", "20", "--simulated-k-ms", "0.5"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield SimulatedTriton(
            f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{metrics_port}/metrics", log
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def wait_model_ready(url: str, log: Path) -> None:
    """Poll KServe ModelReady until the model is up (each poll is the readiness RPC itself)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_TIMEOUT_S
    async with triton.InferenceServerClient(url) as client:
        while loop.time() < deadline:
            try:
                if await client.is_model_ready(MODEL):
                    return
            except InferenceServerException:
                pass  # not listening yet
            await asyncio.sleep(0.1)  # poll interval between readiness RPCs
    pytest.fail(f"simulated Triton not ready:\n{tail(log)}")


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:]


@pytest_asyncio.fixture(scope="module")
async def batcher_url(simulated_triton: SimulatedTriton) -> AsyncIterator[str]:
    await wait_model_ready(simulated_triton.grpc_url, simulated_triton.log)
    config = Config(
        host="127.0.0.1",
        port=0,
        upstream_url=simulated_triton.grpc_url,
        max_queue_delay_ms=200.0,
        max_inflight=1,
    )
    running = await app.start(config)
    url = f"127.0.0.1:{running.port}"
    await wait_serving(url)
    yield url
    await running.stop(1.0)


def image(tag: int) -> np.ndarray[Any, Any]:
    """One image whose simulated class is ``tag`` (its first two bytes, little endian)."""
    pixels = np.full((1, 3, 224, 224), 9, dtype=np.uint8)
    pixels[0, 0, 0, :2] = [tag & 0xFF, tag >> 8]
    return pixels


async def classify(client: triton.InferenceServerClient, tag: int) -> int:
    tensor = triton.InferInput("INPUT", [1, 3, 224, 224], "UINT8")
    tensor.set_data_from_numpy(image(tag))
    result = await client.infer(MODEL, [tensor], request_id=str(tag))
    assert result.get_response().id == str(tag)
    probs = result.as_numpy("PROBS")
    assert probs is not None and probs.shape == (1, 1000)
    return int(probs.argmax())


async def test_concurrent_callers_share_one_gpu_batch_and_get_their_own_answers(
    batcher_url: str, simulated_triton: SimulatedTriton
) -> None:
    before = simulated_triton.counters()
    rpcs = REGISTRY.get_sample_value(
        "inferline_batcher_grpc_requests_total", {"method": "ModelInfer", "code": "OK"}
    )
    tags = [3, 141, 592, 653, 589, 793, 238, 462, 643, 383, 279, 502, 884, 197, 169, 399]
    async with triton.InferenceServerClient(batcher_url) as client:
        classes = await asyncio.gather(*(classify(client, tag) for tag in tags))
    assert classes == tags
    after = simulated_triton.counters()
    assert after["nv_inference_count"] - before["nv_inference_count"] == 16
    assert after["nv_inference_exec_count"] - before["nv_inference_exec_count"] == 1  # one batch
    assert (
        REGISTRY.get_sample_value(
            "inferline_batcher_grpc_requests_total", {"method": "ModelInfer", "code": "OK"}
        )
        == (rpcs or 0) + 16
    )


async def test_metadata_readiness_and_errors_come_from_triton(batcher_url: str) -> None:
    async with triton.InferenceServerClient(batcher_url) as client:
        assert await client.is_server_ready()
        assert await client.is_model_ready(MODEL)
        assert (await client.get_server_metadata()).name == "triton"
        config = (await client.get_model_config(MODEL)).config
        assert config.max_batch_size == 16 and not config.HasField("dynamic_batching")
        tensor = triton.InferInput("INPUT", [1, 3, 2, 2], "UINT8")  # Triton refuses the shape
        tensor.set_data_from_numpy(np.zeros((1, 3, 2, 2), dtype=np.uint8))
        with pytest.raises(Exception, match="unexpected shape") as raised:
            await client.infer(MODEL, [tensor])
        assert "upstream 127.0.0.1:" in str(raised.value)


async def test_health_and_reflection_are_served(batcher_url: str) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    async with grpc.aio.insecure_channel(batcher_url) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        async for response in stub.ServerReflectionInfo(iter([request])):
            names = {s.name for s in response.list_services_response.service}
            assert "inference.GRPCInferenceService" in names
            assert "grpc.health.v1.Health" in names
            break
