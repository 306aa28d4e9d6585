"""The proxyless variant of the local stack: the batcher balances over the Triton replicas
itself (``xds:///triton``, gRPC's xDS client fed by control/eds) instead of through Envoy.

Simulated GPU model (its answers are not a real classification); load from the demo client
through the public endpoint while Triton scales 1 → 2 → 1.
"""

from __future__ import annotations

import asyncio
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo_client.client import open_clients
from demo_client.load import LoadConfig, run_load
from demo_client.stats import Recorder
from inferline_stack.config import StackConfig
from inferline_stack.processes import ProcessTable
from inferline_stack.scale import scale
from inferline_stack.stack import down, up
from inferline_testing import media
from inferline_testing.ports import config_on_free_ports

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def proxyless_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackConfig]:
    config = config_on_free_ports(
        tmp_path_factory.mktemp("proxyless"),
        model="simulated_gpu",
        decode="inprocess",
        proxyless=True,
    )
    table = ProcessTable(Path(config.run_dir))
    if up(config, table) != 0:
        pytest.fail("the proxyless stack did not start; see the log tail above")
    yield config
    down(config, table)


def served(config: StackConfig, replica: int) -> float:
    """Successful inferences of Triton replica ``replica``, from its own /metrics."""
    port = config.replica_ports("triton", replica)[2]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("nv_inference_request_success{")
    )


async def test_the_batcher_balances_over_triton_itself(proxyless_stack: StackConfig) -> None:
    config = proxyless_stack
    table = ProcessTable(Path(config.run_dir))
    recorder = Recorder(concurrency=8)
    stop = asyncio.Event()
    load = LoadConfig(concurrency=8, timeout_s=30.0, duration_s=3600.0)
    images = [media.encode(media.photo("chelsea")[:96, :128])]
    async with open_clients(f"127.0.0.1:{config.public_port}", 2) as clients:
        task = asyncio.create_task(run_load(clients, load, images, recorder, stop))
        try:
            assert await asyncio.to_thread(scale, config, table, "triton", 2) == 0
            first = await asyncio.to_thread(served, config, 1)
            deadline = time.monotonic() + 10
            while await asyncio.to_thread(served, config, 1) < first + 50:
                assert time.monotonic() < deadline, "triton-1 gets no batches from the batcher"
                await asyncio.sleep(0.1)
            assert await asyncio.to_thread(scale, config, table, "triton", 1) == 0
            requests, deadline = recorder.requests, time.monotonic() + 10
            while recorder.requests < requests + 100:  # still flowing on triton-0 alone
                assert time.monotonic() < deadline, f"load stalled at {recorder.requests}"
                await asyncio.sleep(0.05)
        finally:
            stop.set()
            await task
    print(recorder.summary())
    assert recorder.errors == 0, recorder.errors_by_code
    assert await asyncio.to_thread(served, config, 0) > 0
