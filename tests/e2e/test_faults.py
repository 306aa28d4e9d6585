"""One replica of every tier lost under load, on the local stack (the real Envoy, control plane,
middleman, batcher and GPU pods, two replicas of each), one repetition each; ``make
bench-faults`` repeats each many times and prints the table.

Triton serves the *simulated* GPU model (its answers are not a classification). A closed loop
of 8 callers with 10 s deadlines runs on the public endpoint throughout, and every request it
sent is counted, the ones in flight on the lost replica included.

* kill -9: the replica's connections are reset, and the hop in front retries what was in flight
  on the other replica: no request may fail.
* SIGSTOP: the replica hangs with its sockets open. Envoy's HTTP/2 pings find it within about
  2 s and reset its connections, so what was in flight is retried elsewhere; only a request
  whose deadline is shorter than that could fail, and these have 10 s.

Each runs with every inner hop through Envoy; losing a batcher runs again with middleman dialling
the batchers proxyless (then middleman's own keepalive PINGs and its retries,
:mod:`inferline.retry`, do Envoy's part). That dial changes only the hop in front of the
batchers: losing a middleman, a GPU pod or its Triton is met by the same Envoy hops either way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from inferline_stack.config import StackConfig
from inferline_testing import faults, media
from inferline_testing.stacks import own_stack

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


# Both ways an inner hop dials: through Envoy (its retries, PINGs and health checks) and
# proxyless (middleman's own: inferline.retry, keepalive PINGs, the control plane's health),
# the clusters dialled so.
THROUGH_ENVOY, PROXYLESS = "through Envoy", "middleman to the batchers proxyless"
DIALS = {THROUGH_ENVOY: "", PROXYLESS: faults.TIERS["batcher"]}


@pytest.fixture(scope="module")
def fault_stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StackConfig]:
    """A stack whose inner hops dial as ``request.param`` (a key of DIALS) says."""
    with own_stack(
        tmp_path_factory.mktemp("faults"), "fault", model="simulated_gpu",
        proxyless=DIALS[request.param], prometheus=False,  # nothing here reads it
    ) as config:  # fmt: skip
        yield config


def images() -> list[bytes]:
    return [media.encode(media.photo(name)[:96, :128]) for name in ("chelsea", "coffee")]


async def lose_one(config: StackConfig, tier: str, fault: str) -> None:
    await faults.with_replicas(config)
    run = await faults.lose_one(config, tier, fault, images())
    print(f"\n{faults.table([run])}")
    assert run.replica_requests > 0  # it had work when it was lost
    assert run.failed == {}, (run.row(), run.messages)


@pytest.mark.parametrize("fault", faults.FAULTS)
@pytest.mark.parametrize("tier", list(faults.TIERS))
@pytest.mark.parametrize("fault_stack", [THROUGH_ENVOY], indirect=True)
async def test_losing_one_replica_of_a_tier_fails_no_request(
    fault_stack: StackConfig, tier: str, fault: str
) -> None:
    await lose_one(fault_stack, tier, fault)


@pytest.mark.parametrize("fault", faults.FAULTS)
@pytest.mark.parametrize("fault_stack", [PROXYLESS], indirect=True)
async def test_losing_a_batcher_dialled_proxyless_fails_no_request(
    fault_stack: StackConfig, fault: str
) -> None:
    await lose_one(fault_stack, "batcher", fault)
