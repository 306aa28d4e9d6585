"""Nothing of the local stack listens beyond loopback, and only where the README's table of
services and ports says: every listening (TCP) or bound (UDP) socket of every process of the
running stack, read from /proc, checked against the stack's configured ports."""

from __future__ import annotations

import ipaddress

import pytest

from inferline_stack.config import StackConfig
from inferline_stack.services import EDS, ENVOY, parse_replica_name
from inferline_testing.overload import stack_groups
from inferline_testing.procfs import group_pids, listening

pytestmark = pytest.mark.e2e

PROMETHEUS = "prometheus"


def documented(config: StackConfig, name: str) -> set[int]:
    """The ports the README's table gives process ``name`` of ``config``'s stack."""
    fixed = {
        ENVOY: {port for _, port in config.listeners} | {config.envoy_admin_port},
        EDS: {config.eds_port, config.eds_metrics_port},
        PROMETHEUS: {config.prometheus_port},
    }
    if name in fixed:
        return fixed[name]
    replica = parse_replica_name(name)
    assert replica is not None, f"{name}: a process the table does not list"
    return set(config.replica_ports(*replica))


def loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def test_every_listening_socket_is_on_loopback_and_documented(stack: StackConfig) -> None:
    groups = stack_groups(stack)
    assert {ENVOY, EDS, "middleman-0", "triton-0"} <= set(groups)
    for name, pgid in groups.items():
        sockets = listening(group_pids(pgid))
        assert sockets, f"{name} listens nowhere?"
        wide = sorted(
            f"{s.protocol} {s.address}:{s.port}" for s in sockets if not loopback(s.address)
        )
        assert not wide, f"{name} listens beyond loopback: {wide}"
        extra = {s.port for s in sockets} - documented(stack, name)
        assert not extra, f"{name} listens on undocumented ports {sorted(extra)}"
