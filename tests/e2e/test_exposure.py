"""Nothing of the local stack listens beyond loopback, and only where docs/architecture.md's table
of services and ports says: every listening (TCP) or bound (UDP) socket of every process of the
running stack, read from /proc, checked against the ports that table gives the process.

The table gives the default configuration's ports; the test's stack runs on free ports, so each
socket's port is translated to the same setting's default (``StackConfig()``) before the table
is asked. A second test holds the table to the default configuration: no port missing or extra.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path

import pytest

from inferline_stack.config import BATCHER, MAX_REPLICAS, MIDDLEMAN, PREPROCESS, TRITON, StackConfig
from inferline_stack.services import EDS, ENVOY, parse_replica_name
from inferline_stack.traceview import MLFLOW
from inferline_testing.overload.usage import stack_groups
from inferline_testing.procfs import group_pids, listening

pytestmark = pytest.mark.e2e

PAGE = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
HEADING = "## Services and ports (local stack)"
PROMETHEUS = "prometheus"
# The table's first column: which process of the stack each row is (a GPU pod is triton-i).
ROWS = {
    "Envoy": ENVOY,
    "middleman": MIDDLEMAN,
    "preprocess": PREPROCESS,
    "batcher": BATCHER,
    "Triton replica *i*": TRITON,
    "GPU pod *i* (in-pod)": TRITON,
    "control/eds": EDS,
    "Prometheus": PROMETHEUS,
    "MLflow": MLFLOW,
}
ENVOY_PORTS = (
    "public_port", "preprocess_listener_port", "batcher_listener_port", "triton_listener_port",
    "envoy_admin_port",
)  # fmt: skip
FIXED_PORTS = {
    ENVOY: ENVOY_PORTS,
    EDS: ("eds_port", "eds_metrics_port"),
    PROMETHEUS: ("prometheus_port",),
    MLFLOW: ("trace_view_port",),
}
_PORT = re.compile(r"^(\d+)(?:\+(\d+)\*i\*)?$")
_STEP = re.compile(r"^Replica \*i\* of (.+) uses its ports \+ (\d+)\*i\*\.$", re.M)


def table() -> dict[str, set[tuple[int, int]]]:
    """{process: {(port of replica 0, step per replica)}} as the page's table and its note say."""
    text = PAGE.read_text(encoding="utf-8")
    assert HEADING in text, f"{PAGE} has no section {HEADING!r}"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    steps: dict[str, int] = {}
    for match in _STEP.finditer(section):
        for name in re.split(r", | or ", match.group(1)):
            steps[name.removeprefix("the ")] = int(match.group(2))
    ports: dict[str, set[tuple[int, int]]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.startswith("|") or cells[0] in ("process", "---"):
            continue
        assert cells[0] in ROWS, f"{PAGE}: a row the test does not know: {cells[0]!r}"
        process = ROWS[cells[0]]
        for text_port in cells[1].split(" / "):
            port = _PORT.match(text_port)
            assert port, f"{PAGE}: {cells[0]}: {text_port!r} is not a port (N or N+S*i*)"
            step = int(port.group(2)) if port.group(2) else steps.get(process, 0)
            ports.setdefault(process, set()).add((int(port.group(1)), step))
    return ports


def documented(name: str) -> set[int]:
    """The ports the page's table gives process ``name`` (``triton-1``, ``envoy``)."""
    replica = parse_replica_name(name)
    process, index = replica if replica else (name, 0)
    rows = table()
    assert process in rows, f"{name}: a process the table does not list"
    return {port + step * index for port, step in rows[process]}


def as_default(config: StackConfig, name: str) -> dict[int, int]:
    """{each port of process ``name`` in ``config``: the same setting's default port}."""
    default = StackConfig()
    replica = parse_replica_name(name)
    if replica:
        return dict(
            zip(config.replica_ports(*replica), default.replica_ports(*replica), strict=True)
        )
    assert name in FIXED_PORTS, f"{name}: a process the table does not list"
    return {getattr(config, field): getattr(default, field) for field in FIXED_PORTS[name]}


def loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def test_the_table_gives_each_process_the_default_configurations_ports() -> None:
    default = StackConfig()
    names = [
        *FIXED_PORTS,
        *(
            f"{s}-{i}"
            for s in (MIDDLEMAN, PREPROCESS, BATCHER, TRITON)
            for i in (0, 1, MAX_REPLICAS - 1)
        ),
    ]
    for name in names:
        assert documented(name) == set(as_default(default, name).values()), name


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
        configured = as_default(stack, name)
        unknown = {s.port for s in sockets} - set(configured)
        assert not unknown, (
            f"{name} listens on ports its configuration does not give it: {sorted(unknown)}"
        )
        extra = {configured[s.port] for s in sockets} - documented(name)
        assert not extra, (
            f"{name} listens where {PAGE.name}'s table says nothing (as defaults): {sorted(extra)}"
        )
