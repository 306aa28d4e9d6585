"""One of two Triton replicas faulted under load, with real network namespaces (issue 14; the
rig: :mod:`.network_faults`):

* black hole: one of two replicas loses every packet, both ways, with no reset (a pfifo of
  length 0 on each end of its veth). No request may fail (each deadline is far longer than
  the detection time); printed: how long until Envoy stops sending to it and the latency
  effect;
* latency: 200 ms more on one of two replicas (tc netem, or a user-space relay where the
  kernel has no netem). No request may fail; printed: p50/p99 before and during, and each
  replica's share (LEAST_REQUEST moves load away from the slow one).

Figures are printed (``-s``), not asserted; assertions are on failures and on convergence
within generous bounds. Needs root and iproute2 (skips without them; CI requires them).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from eds.cache import Endpoint, Health
from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin
from inferline_testing import netns
from inferline_testing.waits import wait_for

from .network_faults import (
    CLUSTER,
    DEADLINE_S,
    DELAY_MS,
    WAIT_S,
    WINDOW,
    Replica,
    latencies,
    load,
    namespaces,
    rig,
    start,
)

# One worker at a time changes the machine's routing rules (inferline_testing.netns).
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("netns")]


async def test_black_holed_replica_costs_no_request(tmp_path: Path) -> None:
    """One of two replicas black-holed under load: Envoy's health checks fail it, its
    connections are closed, what was in flight there is retried on the other: nothing fails."""
    with namespaces("bh-a", "bh-b") as (ns_a, ns_b):
        a, b = Replica(tmp_path, ns_a, "triton-a"), Replica(tmp_path, ns_b, "triton-b")
        try:
            await start(a, b)
            async with rig(tmp_path) as r:
                await r.announce(a, b)
                async with load(r.envoy.listener(CLUSTER)) as traffic:
                    await traffic.flowing(WINDOW)
                    before = list(traffic.outcomes)
                    faulted = time.monotonic()
                    ns_b.black_hole()
                    last_total, last_sent, detected = -1, faulted, None

                    async def settled() -> bool:
                        nonlocal last_total, last_sent, detected
                        host = await r.host(ns_b.address, b.port)
                        assert host is not None
                        now = time.monotonic()
                        if host.rq_total != last_total:
                            last_total, last_sent = host.rq_total, now
                        if detected is None and not host.routable:
                            detected = now
                        return detected is not None and host.in_flight == 0

                    await wait_for(settled, WAIT_S, "Envoy done with the black-holed replica")
                    await traffic.flowing(WINDOW)  # and the load carries on on the other
                    after = traffic.ended(faulted)
                assert detected is not None
                b_host = await r.host(ns_b.address, b.port)
                retries = await envoy_admin.stats(
                    r.admin, rf"^cluster\.{CLUSTER}\.upstream_rq_retry$"
                )
                ns_b.heal()
                healed = time.monotonic()
                await envoy_admin.wait_routable(r.admin, CLUSTER, ns_b.address, b.port, WAIT_S)
                back = time.monotonic()
        finally:
            await asyncio.gather(a.stop(), b.stop())
    slowest = max((o.latency_s * 1000 for o in after if o.error is None), default=0.0)
    print(
        f"\nblack hole: {len(traffic.outcomes)} requests, {len(traffic.failed)} failed "
        f"(deadline {DEADLINE_S:g} s); Envoy marked the replica unhealthy "
        f"{detected - faulted:.2f} s after the fault, sent it its last request "
        f"{last_sent - faulted:.2f} s after, nothing in flight to it "
        f"(its flags {b_host.flags if b_host else None}); retries {retries}; "
        f"before {latencies(before)}, from the fault {latencies(after)} "
        f"(slowest {slowest:.0f} ms); healed, routable again {back - healed:.1f} s after"
    )
    assert not traffic.failed, f"failed: {traffic.failures()}"


async def test_slow_replica_costs_no_request(tmp_path: Path) -> None:
    """200 ms more latency to one of two replicas: nothing fails; LEAST_REQUEST sends the slow
    one less (the figures say how much)."""
    use_netem = netns.netem_available()
    with namespaces("lat-a", "lat-b") as (ns_a, ns_b):
        a, b = Replica(tmp_path, ns_a, "triton-a"), Replica(tmp_path, ns_b, "triton-b")
        relay = None if use_netem else netns.DelayRelay(ns_b.address, b.port)
        try:
            await start(a, b)
            if relay is not None:
                await relay.start()
                b_endpoint = Endpoint("127.0.0.1", relay.port, Health.HEALTHY, 1, "local", b.name)
            else:
                b_endpoint = b.endpoint()
            async with rig(tmp_path) as r:
                endpoints_file.set_endpoint(r.endpoints, CLUSTER, b_endpoint)
                await r.announce(a)
                await envoy_admin.wait_routable(
                    r.admin, CLUSTER, b_endpoint.address, b_endpoint.port, WAIT_S
                )

                async def shares() -> tuple[int, int]:
                    ha = await r.host(ns_a.address, a.port)
                    hb = await r.host(b_endpoint.address, b_endpoint.port)
                    assert ha is not None and hb is not None
                    return ha.rq_total, hb.rq_total

                async with load(r.envoy.listener(CLUSTER)) as traffic:
                    await traffic.flowing(50)  # warm
                    start0, counts0 = time.monotonic(), await shares()
                    await traffic.flowing(WINDOW)
                    slowed, counts1 = time.monotonic(), await shares()
                    if relay is not None:
                        relay.delay_ms = DELAY_MS
                    else:
                        ns_b.delay(DELAY_MS)
                    await traffic.flowing(WINDOW)
                    counts2 = await shares()
                    before = [o for o in traffic.since(start0) if o.sent < slowed]
                    during = traffic.since(slowed)
        finally:
            if relay is not None:
                await relay.close()
            await asyncio.gather(a.stop(), b.stop())
    share = [(c1 - c0, c2 - c1) for c0, c1, c2 in zip(counts0, counts1, counts2, strict=True)]
    how = "tc netem" if use_netem else "a user-space relay (this kernel has no sch_netem)"
    print(
        f"\n+{DELAY_MS:g} ms on one replica ({how}): {len(traffic.outcomes)} requests, "
        f"{len(traffic.failed)} failed; before {latencies(before)}, during {latencies(during)}; "
        f"requests to (fast, slow) replica: before {share[0][0]}/{share[1][0]}, "
        f"during {share[0][1]}/{share[1][1]}"
    )
    assert not traffic.failed, f"failed: {traffic.failures()}"
    (_, fast_during), (_, slow_during) = share
    assert slow_during < fast_during, share  # LEAST_REQUEST sent the slow replica less
