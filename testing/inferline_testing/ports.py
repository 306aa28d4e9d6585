"""A :class:`StackConfig` on free ports, for tests and benchmarks that run beside a user's stack.

Each port setting gets a free port; a replica's base port gets one whose whole series
(base + step · i for every replica the stack allows) is free, so scaling works too. The stack's
ports lie below the kernel's ephemeral range: a replica started minutes later binds its series
then, and a port of that range free at the start may meanwhile be an outgoing connection's (a
GPU pod scaled up under load failed to bind its preprocess so: "address already in use").
Under pytest-xdist each worker draws them from a slice of that range of its own: two workers'
stacks cannot see each other's series until they bind them (a trace-view stack's GPU pod found
its preprocess port taken by the other worker's stack). :func:`free_port` draws a server's
port that a test starts on its own from the same slice, for the same reasons.
"""

from __future__ import annotations

import os
import random
import socket
from pathlib import Path
from typing import Any

from inferline_stack.config import (
    MAX_REPLICAS,
    PORT_FIELDS,
    REPLICA_PORT_FIELDS,
    REPLICA_STEP,
    StackConfig,
)

ATTEMPTS = 200


_GIVEN: set[int] = set()  # every port this process handed out


def free_port() -> int:
    """A free port for a server a test starts (:func:`free_ports`)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` different ports, free now, below the kernel's ephemeral range and within this
    worker's slice of it, never handed out before in this process. A port the kernel hands out
    for ``bind(("", 0))`` lies in that range: free when picked, it may be an outgoing
    connection's by the time its server binds it, a second later on a busy machine (a session
    middleman failed to start so: "Address already in use"); and the kernel may hand the same
    one to two binds in a row (an eds's metrics and gRPC ports collided)."""
    taken: set[int] = set()
    return [free_series(0, 1, taken) for _ in range(count)]


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


LOWEST = 10000  # below: the well-known services' and the stack's own defaults (8080, 9090, ...)


def ephemeral_floor() -> int:
    """The first port the kernel gives outgoing connections (Linux's ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def worker_slice(low: int, high: int) -> tuple[int, int]:
    """This process's share of ports ``low`` to ``high``: all of them, or under pytest-xdist
    worker gw<k>'s k-th of PYTEST_XDIST_WORKER_COUNT equal slices (its subprocesses inherit it)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if not worker.startswith("gw") or workers < 2:
        return low, high
    width = (high - low) // workers
    index = int(worker.removeprefix("gw")) % workers
    return low + index * width, low + (index + 1) * width


def free_series(step: int, count: int, taken: set[int]) -> int:
    """A base port whose series base + step · i (i < count) is free, not ``taken`` nor handed
    out before, below the ephemeral range (so it stays free while the stack runs) and within
    this process's slice of it (:func:`worker_slice`)."""
    low, high = worker_slice(LOWEST, ephemeral_floor())
    top = high - step * (count - 1)
    for _ in range(ATTEMPTS):
        base = random.randrange(low, top)
        series = {base + step * i for i in range(count)}
        if not (taken | _GIVEN) & series and all(map(bindable, series)):
            taken.update(series)
            _GIVEN.update(series)
            return base
    raise OSError(f"no free series of {count} ports {step} apart after {ATTEMPTS} attempts")


def config_on_free_ports(run_dir: Path | str, **overrides: Any) -> StackConfig:
    """Every port field free (an override keeps its value); other fields from ``overrides``."""
    steps = {
        name: REPLICA_STEP[service]
        for service, names in REPLICA_PORT_FIELDS.items()
        for name in names
    }
    taken: set[int] = {int(overrides[name]) for name in PORT_FIELDS if name in overrides}
    ports = {
        name: free_series(steps.get(name, 0), MAX_REPLICAS if name in steps else 1, taken)
        for name in PORT_FIELDS
        if name not in overrides
    }
    return StackConfig(run_dir=str(run_dir), **{**ports, **overrides})
