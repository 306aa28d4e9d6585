"""Start `python -m inferline_models.triton` for real, classify a photo, stop it with SIGTERM.

The module's server serves two models at once, as `--model` given twice asks: the ONNX model
and the simulated GPU.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from inferline_testing.ports import free_ports
from inferline_testing.waits import wait_until

MODEL = "efficientnet_lite0"
SIMULATED = "simulated_gpu"
READY_TIMEOUT_S = 120.0
EXIT_TIMEOUT_S = 60.0


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
    def __init__(
        self,
        process: subprocess.Popen[bytes],
        grpc_port: int,
        log: Path,
        models: tuple[str, ...] = (MODEL,),
    ) -> None:
        self.process = process
        self.client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc_port}")
        self.log = log
        self.models = models

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def exited(self) -> str | None:
        """Why a wait on this server should give up: it is no longer running."""
        if self.process.poll() is None:
            return None
        return f"server exited with {self.process.returncode}:\n{self.output()}"

    def ready(self) -> bool:
        """KServe ServerReady and ModelReady (the readiness RPCs themselves)."""
        try:
            return self.client.is_server_ready() and all(
                self.client.is_model_ready(m) for m in self.models
            )
        except InferenceServerException:
            return False  # not listening yet

    def wait_ready(self) -> None:
        try:
            wait_until(
                self.ready, READY_TIMEOUT_S, f"{', '.join(self.models)} ready", abort=self.exited
            )
        except (TimeoutError, RuntimeError) as exc:
            pytest.fail(f"{exc}\n{self.output()}")


def spawn(
    repository: Path,
    log: Path,
    ports: list[int] | None = None,
    models: tuple[str, ...] = (MODEL,),
) -> Server:
    grpc_port, http_port, metrics_port = ports or free_ports(3)
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "inferline_models.triton",
                "--repository", str(repository), *(f"--model={m}" for m in models),
                "--address", "127.0.0.1",
                "--grpc-port", str(grpc_port), "--http-port", str(http_port),
                "--metrics-port", str(metrics_port),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    return Server(process, grpc_port, log, models)


@contextmanager
def running_server(
    repository: Path,
    log: Path,
    ports: list[int] | None = None,
    models: tuple[str, ...] = (MODEL,),
) -> Iterator[Server]:
    s = spawn(repository, log, ports, models)
    try:
        yield s
    finally:
        s.client.close()
        if s.process.poll() is None:
            s.process.kill()
            s.process.wait()


@pytest.fixture(scope="module")
def server(model_repository: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One ready server, serving two models, for the tests that only call it (none stops it)."""
    log = tmp_path_factory.mktemp("triton") / "server.log"
    with running_server(model_repository, log, models=(MODEL, SIMULATED)) as s:
        s.wait_ready()
        yield s


def assert_exits_leaving_nothing(server: Server, family: list[int], code: int = 0) -> None:
    assert server.process.wait(timeout=EXIT_TIMEOUT_S) == code, server.output()

    def alive() -> list[tuple[int, str]]:
        return [(p, comm(p)) for p in family if running(p)]

    try:  # the leader has exited; its children (reparented) are on their way out
        wait_until(lambda: not alive(), EXIT_TIMEOUT_S, "the server's children gone")
    except TimeoutError:
        pytest.fail(f"left behind: {alive()}")


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


def test_one_server_answers_both_of_its_models(
    server: Server, cat_chw: npt.NDArray[np.uint8], cat_classes: frozenset[int]
) -> None:
    images = np.stack([cat_chw, cat_chw])
    images[1, 0, 0, :2] = [0x39, 0x05]  # the simulated GPU answers class 1337 % 1000
    answers = {}
    for model in (MODEL, SIMULATED):
        request = grpcclient.InferInput("INPUT", list(images.shape), "UINT8")
        request.set_data_from_numpy(images)
        probs = server.client.infer(model, [request]).as_numpy("PROBS")
        assert probs is not None and probs.shape == (2, 1000)
        answers[model] = probs.argmax(axis=1).tolist()
    assert answers[MODEL][0] in cat_classes
    first_two = images[0, 0, 0, :2].astype(int)
    assert answers[SIMULATED] == [(first_two[0] | first_two[1] << 8) % 1000, 337]


def test_sigterm_stops_triton_and_its_children(model_repository: Path, tmp_path: Path) -> None:
    # A server of its own: stopping the module's would take it from the tests after this one.
    with running_server(model_repository, tmp_path / "server.log") as s:
        s.wait_ready()
        family = descendants(s.process.pid)
        assert "tritonserver" in {comm(p) for p in family}, s.output()
        s.process.send_signal(signal.SIGTERM)
        assert_exits_leaving_nothing(s, family)
        assert "Triton stopped" in s.output()


def test_sigterm_during_startup_stops_cleanly(model_repository: Path, tmp_path: Path) -> None:
    with running_server(model_repository, tmp_path / "server.log") as s:

        def tritonserver_started() -> list[int]:
            family = descendants(s.process.pid)
            return family if "tritonserver" in {comm(p) for p in family} else []

        try:
            family = wait_until(
                tritonserver_started, READY_TIMEOUT_S, "tritonserver started", abort=s.exited
            )
        except (TimeoutError, RuntimeError) as exc:
            pytest.fail(f"{exc}\n{s.output()}")
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
