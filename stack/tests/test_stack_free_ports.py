"""The test stacks' ports: each pytest-xdist worker draws from a slice of its own, so two workers'
stacks never pick the same port series (inferline_testing.ports)."""

from __future__ import annotations

import itertools

import pytest

from inferline_stack.config import MAX_REPLICAS, REPLICA_STEP
from inferline_testing import ports


def test_each_worker_has_a_slice_of_its_own_and_one_process_has_them_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert ports.worker_slice(10000, 32768) == (10000, 32768)
    slices = []
    for k in range(3):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{k}")
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "3")
        slices.append(ports.worker_slice(10000, 32768))
    assert slices[0][0] == 10000 and slices[-1][1] <= 32768
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(slices))  # disjoint


def test_a_workers_series_lie_whole_within_its_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    low, high = ports.worker_slice(ports.LOWEST, ports.ephemeral_floor())
    step = max(REPLICA_STEP.values())
    for _ in range(20):
        base = ports.free_series(step, MAX_REPLICAS, set())
        assert low <= base and base + step * (MAX_REPLICAS - 1) < high


def test_a_servers_free_ports_lie_below_the_ephemeral_range_in_the_workers_slice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An ephemeral port free when picked may be an outgoing connection's when its server binds it.
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    low, high = ports.worker_slice(ports.LOWEST, ports.ephemeral_floor())
    picked = [*ports.free_ports(3), *(ports.free_port() for _ in range(20))]
    assert len(set(picked)) == len(picked)  # never the same one twice
    assert all(low <= port < high and ports.bindable(port) for port in picked)
