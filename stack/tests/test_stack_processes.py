"""Process groups, the stack's CLI answers without a running stack, robust stops and drains."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from eds.cache import Endpoint
from eds.sources import endpoints_file
from inferline_stack import replicas, services
from inferline_stack.__main__ import main
from inferline_stack.config import MAX_REPLICAS, PORT_FIELDS, REPLICA_PORT_FIELDS
from inferline_stack.processes import ProcessTable, group_alive
from inferline_stack.replicas import scale
from inferline_stack.stack import down
from inferline_stack.status import status
from inferline_testing.ports import config_on_free_ports, ephemeral_floor
from inferline_testing.waits import wait_until

# A leader that exits on SIGTERM and leaves a child behind in its process group, which ignores
# SIGTERM; each says so in the log once its handler is set. (The sleeps are their lifetimes.)
LEAVES_A_CHILD = [
    sys.executable,
    "-c",
    "import signal, subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', 'import signal, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    'print("child ignores SIGTERM", flush=True); time.sleep(60)\'])\n'
    "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
    "print('leader started', flush=True)\n"
    "time.sleep(60)\n",
]


def test_stop_leaves_nothing_of_the_group_behind(tmp_path: Path) -> None:
    table = ProcessTable(tmp_path)
    pid = table.start("triton-0", LEAVES_A_CHILD, {}, "abc")

    def both_set() -> bool:
        log = table.log_tail("triton-0")
        return "leader started" in log and "child ignores SIGTERM" in log

    wait_until(both_set, 30, "both processes' SIGTERM handlers set")
    assert table.pid("triton-0") == pid and table.fingerprint("triton-0") == "abc"
    assert table.stop_all(["triton-0", "triton-1"], grace=0.5) == ["triton-0"]
    assert not group_alive(pid)  # the child ignored SIGTERM; SIGKILL after the grace
    assert table.names() == [] and not table.running("triton-0")


def test_down_without_a_run_directory(tmp_path: Path) -> None:
    config = config_on_free_ports(tmp_path / "never-created")
    assert down(config, ProcessTable(Path(config.run_dir))) == 0


def test_scale_says_what_is_wrong(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = config_on_free_ports(tmp_path, batcher=False)
    table = ProcessTable(tmp_path)
    assert scale(config, table, "batcher", 2) == 2  # not part of this configuration
    assert scale(config, table, "triton", 9) == 2
    assert scale(config, table, "triton", 0) == 2
    assert scale(config, table, "triton", 2) == 1  # nothing runs
    err = capsys.readouterr().err
    assert "no service 'batcher'" in err and "between 1 and 8" in err
    assert "the stack is not up" in err


def test_status_without_a_stack(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = config_on_free_ports(tmp_path)
    assert status(config, ProcessTable(tmp_path)) == 3
    out = capsys.readouterr().out
    assert "triton-0" in out and "down" in out and "Envoy's view: not available" in out


def test_cli_rejects_a_bad_setting(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--placement", "gpu"]) == 2
    assert "INFERLINE_STACK_PLACEMENT" in capsys.readouterr().err


def test_drain_without_an_endpoints_file_just_stops(tmp_path: Path) -> None:
    config = config_on_free_ports(tmp_path)
    table = ProcessTable(tmp_path)
    replica = services.replica(config, "triton", 1)
    pid = table.start(replica.name, [sys.executable, "-c", "import time; time.sleep(60)"], {})
    replicas.drain(config, table, [replica])
    assert not group_alive(pid)
    assert not services.endpoints_path(config).exists()


def test_dead_replicas_leave_the_endpoints_file(tmp_path: Path) -> None:
    config = config_on_free_ports(tmp_path)
    table = ProcessTable(tmp_path)
    path = services.endpoints_path(config)
    alive = services.replica(config, "triton", 0)
    dead = services.replica(config, "triton", 1)
    table.start(alive.name, [sys.executable, "-c", "import time; time.sleep(60)"], {})
    endpoints_file.write(path, {"triton": [alive.endpoint(), dead.endpoint()]})
    try:
        assert replicas.forget_dead(config, table, "triton") == ["triton-1"]
        assert endpoints_file.load(path)["triton"] == (
            Endpoint("127.0.0.1", alive.port, zone="local", name="triton-0"),
        )
    finally:
        table.stop_all(table.names(), 1.0)


def test_a_test_stacks_ports_lie_below_the_ephemeral_range_and_differ(tmp_path: Path) -> None:
    # A replica started later binds then: a port an outgoing connection may take by then (the
    # kernel's ephemeral range) would fail it ("address already in use", seen in CI).
    config = config_on_free_ports(tmp_path)
    ports = [
        port
        for service, names in REPLICA_PORT_FIELDS.items()
        for index in range(MAX_REPLICAS)
        for port in config.replica_ports(service, index)
    ] + [getattr(config, name) for name in PORT_FIELDS]
    replica_ports = set(ports[: -len(PORT_FIELDS)])
    assert max(ports) < ephemeral_floor()
    assert len(replica_ports) == len(ports) - len(PORT_FIELDS)  # no two replicas share one
