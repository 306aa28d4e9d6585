"""Retries happen at the hop that failed, and only there, within a budget (issue 22).

Two hops of the pipeline, every process real: callers → Envoy's ``batcher`` listener → the
batcher (``python -m batcher``) → Envoy's ``triton`` listener → a pool of two replicas
(``python -m inferline_testing.fake_backend``, which counts every item it is asked for, and with
``--fail unavailable`` answers every call UNAVAILABLE while its health stays SERVING: a
replica that is up but broken). The control plane feeds Envoy both clusters from an endpoints
file. What reaches the pool is counted at the replicas themselves.

* one of two replicas failing: every request succeeds, and the pool is asked for each item at
  most twice (the first try, one retry on the other replica);
* every replica failing: every request fails UNAVAILABLE before its deadline, and the pool
  sees a bounded share of extra attempts, since Envoy's retry budget refused some retries.
  Before, the batcher's hop retried the UNAVAILABLE it got three more times, the batcher once
  more, and the pool's hop three more times: 32 attempts per item.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from demo_client.client import open_clients
from demo_client.load import LoadConfig, Outcome, run_load
from demo_client.stats import Recorder
from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin
from inferline_stack import scaling
from inferline_testing.harness import (
    BatcherProcess,
    EdsProcess,
    EnvoyProcess,
    FakeBackend,
    envoy_params,
)

pytestmark = pytest.mark.e2e

DEADLINE_S = 5.0
WAIT_S = 30.0  # generous: only how long a broken run takes to fail


@dataclass
class Chain:
    envoy: EnvoyProcess
    batcher: BatcherProcess
    pool: list[FakeBackend]

    async def pool_items(self) -> int:
        return sum(await asyncio.gather(*(p.items() for p in self.pool)))

    async def attempts(self) -> Counter[bytes]:
        """How many times the pool, all replicas together, was asked for each image."""
        return sum(await asyncio.gather(*(p.attempts() for p in self.pool)), Counter())

    async def retries(self, cluster: str) -> tuple[int, int]:
        """Envoy's retries to ``cluster`` and the retries its budget refused."""
        stats = await envoy_admin.stats(
            self.envoy.admin, rf"^cluster\.{cluster}\.upstream_rq_retry(_overflow)?$"
        )
        prefix = f"cluster.{cluster}.upstream_rq_retry"
        return int(stats[prefix]), int(stats[f"{prefix}_overflow"])


@asynccontextmanager
async def chain(tmp_path: Path, fails: tuple[str, ...], **batcher: object) -> AsyncIterator[Chain]:
    endpoints = tmp_path / "endpoints.yaml"
    endpoints_file.write(endpoints, {"batcher": [], "triton": []})
    eds = EdsProcess(tmp_path, endpoints, ["batcher", "triton"])
    await eds.start_ready()
    envoy = EnvoyProcess(tmp_path, envoy_params(eds.port, ["batcher", "triton"]))
    pool = [FakeBackend(tmp_path, f"triton-{i}", 5.0, fail) for i, fail in enumerate(fails)]
    settings = {"max_batch_size": 8, "max_queue_delay_ms": 1.0, **batcher}
    server = BatcherProcess(tmp_path, envoy.listener("triton"), settings)
    processes = [eds, envoy, server, *pool]
    try:
        await asyncio.gather(envoy.start_ready(), server.start_ready(),
                             *(p.start_ready() for p in pool))  # fmt: skip
        members = [("batcher", server.endpoint())] + [("triton", p.endpoint()) for p in pool]
        assert await scaling.announce(endpoints, members, envoy.admin, WAIT_S) is not None
        yield Chain(envoy, server, pool)
    finally:
        for p in processes:  # shown when a test fails
            print(f"--- {p.name}\n{p.tail(10)}")
        await asyncio.gather(*(p.stop(2.0) for p in reversed(processes)))


async def callers(target: str, concurrency: int, each: int) -> Counter[str]:
    """``concurrency * each`` one-image requests, every image its own, from ``concurrency``
    closed-loop callers (the demo client's): status counts."""
    count = concurrency * each
    images = [f"image {i}".encode() for i in range(count)]
    config = LoadConfig(concurrency=concurrency, count=count, duration_s=None, timeout_s=DEADLINE_S)
    codes: Counter[str] = Counter()

    def ended(outcome: Outcome) -> None:
        codes[outcome.error or "OK"] += 1

    async with open_clients(target) as clients:
        await run_load(clients, config, images, Recorder(concurrency), on_outcome=ended)
    return codes


async def test_one_failing_replica_of_two_costs_no_request_and_is_retried_at_the_pool_hop_only(
    tmp_path: Path,
) -> None:
    async with chain(tmp_path, ("", "unavailable")) as c:
        codes = await callers(c.envoy.listener("batcher"), concurrency=8, each=25)
        healthy, failing = [await p.items() for p in c.pool]
        attempts = await c.attempts()
        pool_retries, _ = await c.retries("triton")
        batcher_retries, _ = await c.retries("batcher")
    requests = sum(codes.values())
    print(f"{codes}; the pool asked for {healthy} + {failing} (failing) items, at most "
          f"{max(attempts.values())} for an image; Envoy retried {pool_retries} to the pool, "
          f"{batcher_retries} to the batcher")  # fmt: skip
    assert codes == {"OK": requests}, codes
    assert failing > 0, "the failing replica was never tried: the test proved nothing"
    assert healthy + failing == attempts.total()
    assert len(attempts) == requests  # each image reached the pool ...
    assert healthy == requests  # ... and the healthy replica answered each once: none twice
    assert pool_retries > 0 and batcher_retries == 0  # retried where it failed, only there
    # Not asserted: at most one retry per image. A retry's pick of "another" host is Envoy's
    # best effort (previous_hosts): about one image in 200, in one run in six here, went
    # to the failing replica twice before the healthy one answered it.


async def test_a_failing_pool_fails_each_request_unavailable_in_time_and_bounds_extra_attempts(
    tmp_path: Path,
) -> None:
    # Each request its own upstream call, as many in flight as there are callers: the budget
    # (retries in flight at most a fifth of the requests in flight, above its floor of 16)
    # then binds.
    async with chain(
        tmp_path, ("unavailable", "unavailable"),
        max_batch_size=1, max_inflight=256, adaptive_inflight=False,
    ) as c:  # fmt: skip
        codes = await callers(c.envoy.listener("batcher"), concurrency=128, each=4)
        items = await c.pool_items()
        retries, refused = await c.retries("triton")
        batcher_retries, _ = await c.retries("batcher")
    requests = sum(codes.values())
    print(f"{codes}; the pool was asked for {items} items ({items / requests:.2f} per request); "
          f"Envoy retried {retries} and its budget refused {refused}")  # fmt: skip
    assert codes == {"UNAVAILABLE": requests}, codes  # not DEADLINE_EXCEEDED: within the deadline
    assert batcher_retries == 0
    assert refused > 0, "the retry budget never refused a retry"
    # The budget held: without it every request would make 1 + num_retries = 4 attempts; with it
    # 1.3-1.7 here (it bounds retries in flight, not in all, so bursts and its floor of 16 vary
    # the figure), and under 2.5 on a loaded machine.
    assert requests <= items < 2.5 * requests
