"""The proxyless variant of the local stack: the batcher balances over the Triton replicas
itself (``xds:///triton``, gRPC's xDS client fed by control/eds) instead of through Envoy.

Simulated GPU model (its answers are not a real classification); load from the demo client
through the public endpoint while Triton scales 1 → 2 → 1.
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferline_stack.config import StackConfig
from inferline_stack.processes import ProcessTable
from inferline_stack.scale import scale
from inferline_testing import media
from inferline_testing.harness import flowing, load
from inferline_testing.stacks import own_stack
from inferline_testing.waits import wait_for

pytestmark = pytest.mark.e2e

WAIT_S = 60.0  # generous: only bounds how long a broken run takes to fail


@pytest.fixture(scope="module")
def proxyless_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackConfig]:
    with own_stack(
        tmp_path_factory.mktemp("proxyless"), "proxyless",
        model="simulated_gpu", placement="in-process", proxyless=True,
    ) as config:  # fmt: skip
        yield config


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
    assert await asyncio.to_thread(scale, config, table, "triton", 1) == 0  # from one replica
    images = [media.encode(media.photo("chelsea")[:96, :128])]
    async with load(
        f"127.0.0.1:{config.public_port}", concurrency=8, timeout_s=30.0, images=images
    ) as recorder:
        await flowing(recorder)
        assert await asyncio.to_thread(scale, config, table, "triton", 2) == 0
        first = await asyncio.to_thread(served, config, 1)

        async def triton_1_serves() -> bool:  # the batcher's own xDS client found it
            return await asyncio.to_thread(served, config, 1) >= first + 50

        await wait_for(triton_1_serves, WAIT_S, "50 inferences at triton-1 from the batcher")
        assert await asyncio.to_thread(scale, config, table, "triton", 1) == 0
        at_triton_0 = await asyncio.to_thread(served, config, 0)
        await flowing(recorder, 100)  # still flowing on triton-0 alone
    print(recorder.summary())
    assert recorder.errors == 0, recorder.errors_by_code

    async def triton_0_served() -> bool:  # (Triton's statistics may trail its answers)
        return await asyncio.to_thread(served, config, 0) > at_triton_0

    await wait_for(triton_0_served, WAIT_S, "triton-0 serving after the scale-down")
