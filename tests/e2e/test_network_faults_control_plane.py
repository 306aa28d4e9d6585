"""The control plane cut off under load, with real network namespaces (issue 14; the rig:
:mod:`.network_faults`): the control plane in a namespace of its own is black-holed for
:data:`CUT_S` while a replica is added and another drained in the endpoints file. Envoy keeps
serving its last good endpoints (no failure, its view unchanged), and converges once the
control plane is reachable again (printed: how long after).

Figures are printed (``-s``), not asserted; assertions are on failures and on convergence
within generous bounds. Needs root and iproute2 (skips without them; CI requires them).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from eds.cache import Health
from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin
from inferline_testing.waits import wait_for

from .network_faults import CLUSTER, WAIT_S, WINDOW, Replica, load, namespaces, rig, start

# One worker at a time changes the machine's routing rules (inferline_testing.netns).
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("netns")]

CUT_S = 30.0  # how long the control plane is cut off (the 30 s)


async def test_control_plane_cut_off(tmp_path: Path) -> None:
    """The control plane unreachable for :data:`CUT_S` while a replica is added and another
    drained: Envoy serves its last good endpoints meanwhile and converges once it is back."""
    with namespaces("cp-eds", "cp-a", "cp-b", "cp-c") as (ns_eds, ns_a, ns_b, ns_c):
        a = Replica(tmp_path, ns_a, "triton-a")
        b = Replica(tmp_path, ns_b, "triton-b")
        c = Replica(tmp_path, ns_c, "triton-c")
        try:
            await start(a, b, c)
            async with rig(tmp_path, eds_ns=ns_eds) as r:
                await r.announce(a, b)

                async def view() -> dict[tuple[str, int], str]:
                    hosts = (await envoy_admin.clusters(r.admin)).get(CLUSTER, [])
                    return {h.key: h.state for h in hosts}

                async def connected() -> bool:
                    stats = await envoy_admin.stats(r.admin, r"^control_plane\.connected_state$")
                    return stats.get("control_plane.connected_state") == 1

                async with load(r.envoy.listener(CLUSTER)) as traffic:
                    await traffic.flowing(WINDOW)
                    good = await view()
                    ns_eds.black_hole()
                    cut = time.monotonic()
                    endpoints_file.set_endpoint(r.endpoints, CLUSTER, c.endpoint())
                    endpoints_file.set_health(
                        r.endpoints, CLUSTER, ns_b.address, b.port, Health.DRAINING
                    )
                    views, lost = set(), None
                    while time.monotonic() - cut < CUT_S:  # the fault's duration, watched
                        views.add(tuple(sorted((await view()).items())))
                        if lost is None and not await connected():
                            lost = time.monotonic()
                        await asyncio.sleep(0.5)
                    during = traffic.since(cut)
                    ns_eds.heal()
                    healed = time.monotonic()

                    async def converged() -> bool:
                        hb = await r.host(ns_b.address, b.port)
                        hc = await r.host(ns_c.address, c.port)
                        return bool(
                            hc is not None and hc.routable
                            and hb is not None and hb.eds_health == "DRAINING"
                        )  # fmt: skip

                    await wait_for(connected, 60.0, "Envoy reconnected to the control plane")
                    reconnected = time.monotonic()
                    await wait_for(converged, WAIT_S, "Envoy has the new endpoints")
                    done = time.monotonic()
                    await envoy_admin.wait_drained(r.admin, CLUSTER, ns_b.address, b.port, WAIT_S)
                    await b.stop()
                    endpoints_file.remove_endpoint(r.endpoints, CLUSTER, ns_b.address, b.port)
                    await envoy_admin.wait_gone(r.admin, CLUSTER, ns_b.address, b.port, WAIT_S)
                    c_before = (await r.host(ns_c.address, c.port)).rq_total  # type: ignore[union-attr]
                    await traffic.flowing(WINDOW)
                    c_after = (await r.host(ns_c.address, c.port)).rq_total  # type: ignore[union-attr]
        finally:
            await asyncio.gather(a.stop(), b.stop(), c.stop())
    lost_text = f"{lost - cut:.1f} s into the cut" if lost is not None else "not within the cut"
    print(
        f"\ncontrol plane cut off {CUT_S:g} s: {len(traffic.outcomes)} requests, "
        f"{len(traffic.failed)} failed ({len(during)} during the cut, "
        f"{sum(o.error is not None for o in during)} failed); Envoy's view during the cut: "
        f"{len(views)} distinct (the last good one: {sorted(good.items())}); Envoy saw the "
        f"control plane gone {lost_text}; reconnected {reconnected - healed:.1f} s after the "
        f"network came back, had the new endpoints {done - healed:.1f} s after; the new "
        f"replica served {c_after - c_before} of the next {WINDOW} requests"
    )
    assert views == {tuple(sorted(good.items()))}, f"Envoy's view changed while cut off: {views}"
    assert not traffic.failed, f"failed: {traffic.failures()}"
    assert c_after > c_before
