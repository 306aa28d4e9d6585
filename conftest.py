"""Fixtures shared by every suite: the real local stack on free ports, and the placements of
middleman that the end-to-end suites run against.

The whole pipeline as the user runs it (`make up`): control plane, Envoy, Triton with the real
model, batcher, preprocess and middleman, every hop through Envoy. ``public_url`` is
parametrised over where middleman runs and decodes, so every end-to-end test that takes it runs
once per placement:

- ``stack``: the stack's public endpoint, in the default (in-pod) placement: Envoy → middleman →
  Envoy → batcher → Envoy → the GPU pod (a preprocess beside each Triton, shared memory);
- ``remote-decode``: a middleman of its own calling a preprocess service of its own directly,
  then the session's Triton directly (no Envoy, no batcher);
- ``in-process-decode``: a middleman of its own decoding in process, then the session's Triton.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferline_stack.config import StackConfig
from inferline_stack.health import wait_ready
from inferline_stack.processes import ProcessTable
from inferline_testing.ports import free_port
from inferline_testing.stacks import stack_fixture

ROOT = Path(__file__).parent
MODEL_REPOSITORY = ROOT / "build" / "model_repository"
MODELS = ("efficientnet_lite0", "efficientnet_lite2")
PLACEMENTS = ("stack", "remote-decode", "in-process-decode")
START_TIMEOUT_S = 120.0
# The extra placements stream video in chunks of 4 frames (the stack keeps the default), so a
# video's responses span several chunks and inference calls somewhere.
CHUNK_FRAMES = "4"

# Whatever a test starts is stopped when the session ends, however it ends (SIGTERM too).
pytest_plugins = ["inferline_testing.owned_session"]


STACKS = {"stack", "public_url", "public_rest_url", "middlemen"}  # fixtures that start one


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what needs the session's stack (``stack``): `make test-fast` leaves it out. Under
    pytest-xdist's ``--dist loadgroup`` (`make test`), a module's tests run on one worker, so a
    module's own stack starts once; the modules that use the session's stack all run on one
    worker, so that it starts once, not on every worker; a module marked with a group of its own
    (what shares something of the machine's, such as its routing rules) runs on that group's."""
    modules = {item: item.nodeid.split("::")[0] for item in items}
    stacked = [item for item in items if uses_the_stack(item)]
    on_stack = {modules[item] for item in stacked}
    for item in stacked:
        item.add_marker(pytest.mark.stack)
    for item, module in modules.items():
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group("stack" if module in on_stack else module))


def uses_the_stack(item: pytest.Item) -> bool:
    return bool(STACKS & set(getattr(item, "fixturenames", ())))


@pytest.fixture(scope="session")
def model_repository() -> Path:
    """The Triton model repository with both built-in models (`make model MODELS="…"`), built
    once if missing: the session's stack serves them side by side."""
    subprocess.run(
        [sys.executable, "-m", "inferline_models", "build", "--repository",
         str(MODEL_REPOSITORY), *MODELS],
        check=True,
    )  # fmt: skip
    return MODEL_REPOSITORY


# The real stack as processes on free ports: every model, Prometheus scraping every second (series
# within a second or two of load).
stack = stack_fixture(
    "local",
    scope="session",
    prometheus_config=str(ROOT / "grafana" / "prometheus" / "prometheus.yml"),
    scrape_interval_s=1.0,
)


def _service_env(service: str, port: int, **settings: str) -> dict[str, str]:
    prefix = f"INFERLINE_{service.upper()}"
    env = {"HOST": "127.0.0.1", "PORT": str(port), "METRICS_PORT": str(free_port()), **settings}
    return {f"{prefix}_{name.upper()}": value for name, value in env.items()}


@pytest.fixture(scope="session")
def middlemen(
    stack: StackConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """{placement: gRPC address, placement + "-rest": REST address} of two more middlemen on
    the session's Triton, as processes exactly as deployed: ``remote-decode`` (with a
    preprocess service of its own) and ``in-process-decode``. Each is ready once its KServe
    ServerReady and ModelReady say so."""
    table = ProcessTable(tmp_path_factory.mktemp("placements"))
    preprocess_port = free_port()
    ports = {placement: free_port() for placement in PLACEMENTS[1:]}
    rest_ports = {placement: free_port() for placement in PLACEMENTS[1:]}
    triton = f"127.0.0.1:{stack.triton_grpc_port}"
    processes = {  # name -> (module, env, address, model it serves)
        "preprocess": (
            "preprocess",
            _service_env(
                "preprocess", preprocess_port, workers="2", video_chunk_frames=CHUNK_FRAMES
            ),
            f"127.0.0.1:{preprocess_port}",
            "preprocess",
        ),
        **{
            f"middleman-{placement}": (
                "middleman",
                _service_env(
                    "middleman",
                    port,
                    rest_port=str(rest_ports[placement]),
                    triton_url=triton,
                    triton_model=stack.model,
                    repository=stack.model_repository,
                    preprocess_url=(
                        f"127.0.0.1:{preprocess_port}" if placement == "remote-decode" else ""
                    ),
                    video_chunk_frames=CHUNK_FRAMES,
                ),
                f"127.0.0.1:{port}",
                "classifier",
            )
            for placement, port in ports.items()
        },
    }
    try:
        for name, (module, env, _, _) in processes.items():
            table.start(name, [sys.executable, "-m", module], env)
        for name, (_, _, address, model) in processes.items():
            running = functools.partial(table.running, name)
            if not wait_ready(address, model, START_TIMEOUT_S, running):
                pytest.fail(f"{name} did not become ready:\n{table.log_tail(name)}")
        yield {
            **{placement: f"127.0.0.1:{port}" for placement, port in ports.items()},
            **{f"{placement}-rest": f"127.0.0.1:{port}" for placement, port in rest_ports.items()},
        }
    finally:
        table.stop_all(list(processes), 10)


@pytest.fixture(scope="session", params=PLACEMENTS)
def public_url(request: pytest.FixtureRequest, stack: StackConfig) -> str:
    """The public KServe v2 endpoint of each placement in turn (see the module's docstring)."""
    if request.param == "stack":
        return f"127.0.0.1:{stack.public_port}"
    middlemen: dict[str, str] = request.getfixturevalue("middlemen")
    return middlemen[request.param]


@pytest.fixture(scope="session", params=PLACEMENTS)
def public_rest_url(request: pytest.FixtureRequest, stack: StackConfig) -> str:
    """The public KServe v2 REST endpoint (host:port) of each placement in turn: the stack's is
    the same Envoy listener as its gRPC one (Envoy routes by content-type)."""
    if request.param == "stack":
        return f"127.0.0.1:{stack.public_port}"
    middlemen: dict[str, str] = request.getfixturevalue("middlemen")
    return middlemen[f"{request.param}-rest"]
