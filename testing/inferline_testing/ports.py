"""A :class:`StackConfig` on free ports, for tests and benchmarks that run beside a user's stack.

Each port setting gets a free port; a replica's base port gets one whose whole series
(base + step · i for every replica the stack allows) is free, so scaling works too.
"""

from __future__ import annotations

import contextlib
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


_GIVEN: set[int] = set()  # every port free_port handed out in this process


def free_port() -> int:
    """A port free now, never one this process was given before: the kernel may hand the same
    ephemeral port to two binds in a row, and two settings given one port collide when the
    second is bound (an eds's metrics and gRPC ports did)."""
    for _ in range(ATTEMPTS):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port not in _GIVEN:
            _GIVEN.add(port)
            return port
    raise OSError(f"no free port not handed out before after {ATTEMPTS} attempts")


def free_ports(count: int) -> list[int]:
    """``count`` different free ports (held together while they are picked)."""
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_series(step: int, count: int, taken: set[int]) -> int:
    """A free base port whose series base + step · i (i < count) is free and not ``taken``."""
    for _ in range(ATTEMPTS):
        base = free_port()
        series = [base + step * i for i in range(count)]
        if series[-1] < 65536 and not taken & set(series) and all(map(bindable, series[1:])):
            taken.update(series)
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
