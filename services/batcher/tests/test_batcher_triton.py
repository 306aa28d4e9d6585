"""Through the real Triton server (PyTriton) serving the *simulated* GPU, with the batcher
started as ``python -m batcher`` starts it (health, reflection, RPC metrics)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
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
from inferline_testing.ports import free_ports
from inferline_testing.waits import wait_for, wait_for_state

from .conftest import WAIT_S, wait_serving

MODEL = "simulated_gpu"
MAX_BATCH_SIZE = 16
READY_TIMEOUT_S = 120.0


@dataclass
class SimulatedTriton:
    grpc_url: str
    metrics_url: str
    log: Path
    process: subprocess.Popen[bytes]

    def exited(self) -> str | None:
        """Why a wait on this server should give up: it is no longer running."""
        if self.process.poll() is None:
            return None
        return f"simulated Triton exited with {self.process.returncode}:\n{tail(self.log)}"

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
             "--no-dynamic-batching", "--max-batch-size", str(MAX_BATCH_SIZE),
             "--simulated-t0-ms", "20", "--simulated-k-ms", "0.5"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield SimulatedTriton(
            f"127.0.0.1:{grpc_port}", f"http://127.0.0.1:{metrics_port}/metrics", log, process
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def wait_model_ready(server: SimulatedTriton) -> None:
    """Until KServe ModelReady says the model is up (each check is the readiness RPC)."""
    async with triton.InferenceServerClient(server.grpc_url) as client:

        async def ready() -> bool:
            try:
                return bool(await client.is_model_ready(MODEL))
            except InferenceServerException:
                return False  # not listening yet

        await wait_for(ready, READY_TIMEOUT_S, f"{MODEL} ready", abort=server.exited)


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:]


@asynccontextmanager
async def batcher_for(server: SimulatedTriton, max_queue_delay_ms: float) -> AsyncIterator[str]:
    """The batcher, as ``python -m batcher`` starts it, in front of ``server``; its address."""
    await wait_model_ready(server)
    config = Config(
        host="127.0.0.1",
        port=0,
        upstream_url=server.grpc_url,
        max_queue_delay_ms=max_queue_delay_ms,
        max_inflight=1,
    )
    running = await app.start(config)
    url = f"127.0.0.1:{running.port}"
    try:
        await wait_serving(url)
        yield url
    finally:
        await running.stop(1.0)


@pytest_asyncio.fixture(scope="module")
async def batcher_url(simulated_triton: SimulatedTriton) -> AsyncIterator[str]:
    async with batcher_for(simulated_triton, max_queue_delay_ms=200.0) as url:
        yield url


def image(tag: int) -> np.ndarray[Any, Any]:
    """One image whose simulated class is ``tag`` (its first two bytes, little endian)."""
    pixels = np.full((1, 3, 224, 224), 9, dtype=np.uint8)
    pixels[0, 0, 0, :2] = [tag & 0xFF, tag >> 8]
    return pixels


async def classify(
    client: triton.InferenceServerClient, tag: int, timeout_s: float | None = None
) -> int:
    tensor = triton.InferInput("INPUT", [1, 3, 224, 224], "UINT8")
    tensor.set_data_from_numpy(image(tag))
    result = await client.infer(MODEL, [tensor], request_id=str(tag), client_timeout=timeout_s)
    assert result.get_response().id == str(tag)
    probs = result.as_numpy("PROBS")
    assert probs is not None and probs.shape == (1, 1000)
    return int(probs.argmax())


def ok_rpcs() -> float:
    labels = {"method": "ModelInfer", "model": MODEL, "code": "OK"}
    return REGISTRY.get_sample_value("inferline_batcher_grpc_requests_total", labels) or 0.0


async def test_concurrent_callers_share_one_gpu_batch_and_get_their_own_answers(
    simulated_triton: SimulatedTriton,
) -> None:
    # A partial batch would wait a minute, longer than any caller does: the batch goes when it
    # is full (16 callers, the model's max_batch_size), however slowly they arrive.
    tags = [3, 141, 592, 653, 589, 793, 238, 462, 643, 383, 279, 502, 884, 197, 169, 399]
    assert len(tags) == MAX_BATCH_SIZE
    async with batcher_for(simulated_triton, max_queue_delay_ms=60_000.0) as url:
        before = simulated_triton.counters()
        rpcs = ok_rpcs()
        async with triton.InferenceServerClient(url) as client:
            calls = (classify(client, tag, timeout_s=WAIT_S) for tag in tags)
            classes = await asyncio.gather(*calls)
    assert classes == tags  # each caller got its own answer
    assert ok_rpcs() == rpcs + len(tags)

    def counted() -> dict[str, float]:  # Triton's statistics may trail its answers
        now = simulated_triton.counters()
        done = now["nv_inference_count"] - before["nv_inference_count"] >= len(tags)
        return now if done else {}

    after = await wait_for_state(counted, WAIT_S, "Triton's count of the 16 inferences")
    assert after["nv_inference_count"] - before["nv_inference_count"] == len(tags)
    assert after["nv_inference_exec_count"] - before["nv_inference_exec_count"] == 1  # one batch


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
        responses = [r async for r in stub.ServerReflectionInfo(iter([request]), timeout=WAIT_S)]
    assert len(responses) == 1  # one answer to the one request
    names = {s.name for s in responses[0].list_services_response.service}
    assert "inference.GRPCInferenceService" in names
    assert "grpc.health.v1.Health" in names
