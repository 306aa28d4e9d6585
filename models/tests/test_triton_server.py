"""Start `python -m inferline_models.triton` for real, classify a photo, stop it with SIGTERM."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

MODEL = "efficientnet_lite0"
READY_TIMEOUT_S = 120.0
EXIT_TIMEOUT_S = 60.0
POLL_S = 0.1


def free_ports(count: int) -> list[int]:
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def descendants(pid: int) -> list[int]:
    result: list[int] = []
    pending = children(pid)
    while pending:
        child = pending.pop()
        result.append(child)
        pending += children(child)
    return result


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Server:
    def __init__(self, process: subprocess.Popen[bytes], grpc_port: int, log: Path) -> None:
        self.process = process
        self.client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        self.log = log

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"server exited with {self.process.returncode}:\n{self.output()}")
            try:
                if self.client.is_server_ready() and self.client.is_model_ready(MODEL):
                    return
            except InferenceServerException:
                pass  # not listening yet
            time.sleep(POLL_S)  # poll interval, readiness itself is the RPC
        pytest.fail(f"not ready after {READY_TIMEOUT_S}s:\n{self.output()}")


def spawn(repository: Path, log: Path, ports: list[int] | None = None) -> Server:
    grpc_port, http_port, metrics_port = ports or free_ports(3)
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "inferline_models.triton",
                "--repository", str(repository), "--model", MODEL,
                "--address", "127.0.0.1",
                "--grpc-port", str(grpc_port), "--http-port", str(http_port),
                "--metrics-port", str(metrics_port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    return Server(process, grpc_port, log)


@contextmanager
def running_server(repository: Path, log: Path, ports: list[int] | None = None) -> Iterator[Server]:
    s = spawn(repository, log, ports)
    try:
        yield s
    finally:
        s.client.close()
        if s.process.poll() is None:
            s.process.kill()
            s.process.wait()


@pytest.fixture(scope="module")
def server(model_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    log = tmp_path_factory.mktemp("triton") / "server.log"
    with running_server(model_repository, log) as s:
        s.wait_ready()
        yield s


def assert_exits_leaving_nothing(server: Server, family: list[int], code: int = 0) -> None:
    assert server.process.wait(timeout=EXIT_TIMEOUT_S) == code, server.output()
    deadline = time.monotonic() + 10.0
    while (alive := [p for p in family if running(p)]) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    assert not alive, f"left behind: {[(p, comm(p)) for p in alive]}"


def test_model_metadata(server: Server) -> None:
    config = server.client.get_model_config(MODEL).config
    assert config.max_batch_size == 64
    assert [(i.name, list(i.dims)) for i in config.input] == [("INPUT", [3, 224, 224])]
    assert [(o.name, list(o.dims)) for o in config.output] == [("PROBS", [1000])]
    assert config.HasField("dynamic_batching")


def test_classifies_a_cat(
    server: Server, cat_chw: npt.NDArray[np.uint8], cat_classes: frozenset[int]
) -> None:
    images = np.stack([cat_chw, cat_chw])
    request = grpcclient.InferInput("INPUT", list(images.shape), "UINT8")
    request.set_data_from_numpy(images)
    result = server.client.infer(MODEL, [request])
    probs = result.as_numpy("PROBS")
    assert probs is not None
    assert probs.shape == (2, 1000)
    assert probs.dtype == np.float32
    top3 = set(np.argsort(-probs[0])[:3].tolist())
    assert top3 & cat_classes, f"top-3 {top3} has no domestic cat"
    np.testing.assert_allclose(probs[1], probs[0], atol=1e-6)


def test_sigterm_stops_triton_and_its_children(server: Server) -> None:
    pid = server.process.pid
    family = descendants(pid)
    assert "tritonserver" in {comm(p) for p in family}, server.output()
    server.process.send_signal(signal.SIGTERM)
    assert_exits_leaving_nothing(server, family)
    assert "Triton stopped" in server.output()


def test_sigterm_during_startup_stops_cleanly(model_repository: Path, tmp_path: Path) -> None:
    with running_server(model_repository, tmp_path / "server.log") as s:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not (family := descendants(s.process.pid)) or "tritonserver" not in {
            comm(p) for p in family
        }:
            assert time.monotonic() < deadline, s.output()
            assert s.process.poll() is None, s.output()
            time.sleep(POLL_S)
        s.process.send_signal(signal.SIGTERM)
        assert_exits_leaving_nothing(s, descendants(s.process.pid) + family)


def test_busy_port_fails_fast_by_name(model_repository: Path, tmp_path: Path) -> None:
    ports = free_ports(3)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", ports[0]))
        busy.listen()
        with running_server(model_repository, tmp_path / "server.log", ports) as s:
            assert s.process.wait(timeout=EXIT_TIMEOUT_S) == 2
            assert f"grpc port 127.0.0.1:{ports[0]} is not available" in s.output()
