"""Middleman dials the batchers proxyless (``xds:///batcher``: gRPC's xDS client fed by
control/eds, no Envoy in between) and balances over them itself while the batcher scales
1 → 2 → 1 under the demo client's load: the new batcher takes requests, the drained one is left
without losing any.

Simulated GPU model (its answers are not a real classification).
"""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferline_envoy import admin as envoy_admin
from inferline_stack.config import StackConfig
from inferline_stack.processes import ProcessTable
from inferline_stack.replicas import scale
from inferline_testing import media
from inferline_testing.harness import flowing, load
from inferline_testing.stacks import own_stack
from inferline_testing.waits import wait_for

pytestmark = pytest.mark.e2e

WAIT_S = 60.0  # generous: only bounds how long a broken run takes to fail


@pytest.fixture(scope="module")
def proxyless_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackConfig]:
    with own_stack(
        tmp_path_factory.mktemp("proxyless"),
        "proxyless",
        model="simulated_gpu",
        proxyless="batcher",
        prometheus=False,  # nothing here reads it
    ) as config:
        yield config


def taken(config: StackConfig, replica: int) -> float:
    """ModelInfer calls batcher replica ``replica`` has handled, from its own /metrics."""
    port = config.replica_ports("batcher", replica)[1]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("inferline_batcher_grpc_requests_total{")
        and 'method="ModelInfer"' in line
    )


async def test_middleman_balances_over_the_batchers_itself(proxyless_stack: StackConfig) -> None:
    config = proxyless_stack
    table = ProcessTable(Path(config.run_dir))
    assert await asyncio.to_thread(scale, config, table, "batcher", 1) == 0
    images = [media.encode(media.photo("chelsea")[:96, :128])]
    async with load(
        f"127.0.0.1:{config.public_port}", concurrency=8, timeout_s=30.0, images=images
    ) as recorder:
        await flowing(recorder)
        assert await asyncio.to_thread(scale, config, table, "batcher", 2) == 0

        async def batcher_1_serves() -> bool:  # middleman's own xDS client found it
            return await asyncio.to_thread(taken, config, 1) >= 50

        await wait_for(batcher_1_serves, WAIT_S, "50 requests at batcher-1 from middleman")
        assert await asyncio.to_thread(scale, config, table, "batcher", 1) == 0
        at_batcher_0 = await asyncio.to_thread(taken, config, 0)
        await flowing(recorder, 100)  # still flowing on batcher-0 alone
    print(recorder.summary())
    assert recorder.errors == 0, recorder.errors_by_code
    assert await asyncio.to_thread(taken, config, 0) > at_batcher_0
    # and none of it went through Envoy: its batcher cluster was never sent a request
    through_envoy = await envoy_admin.stats(
        config.admin_url, r"^cluster\.batcher\.upstream_rq_total$"
    )
    assert through_envoy and set(through_envoy.values()) == {0}, through_envoy
