"""A local stack of a test's own: on free ports, up for the block, down after it.

    with own_stack(tmp_path_factory.mktemp("auth"), "auth", auth=True) as config:
        ...

``settings`` are StackConfig fields; a stack that does not start fails the test, naming it (the
stack has printed its log tail). :func:`stack_fixture` makes the fixture of such a stack that
serves the session's model repository (the ``model_repository`` fixture of the root conftest).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

from inferline_stack.config import StackConfig
from inferline_stack.processes import ProcessTable
from inferline_stack.stack import down, up
from inferline_testing.ports import config_on_free_ports

# The simulated GPU at 100 ms a batch, for tests that hold a closed-loop load while something
# happens (a scale, a fault): the load is then bounded by the "GPU" (8 callers: about 70 requests
# a second), not by the machine's cores. At the default 8 ms a batch, 8 callers take every core
# there is, for requests no test counts, from the tests beside it (make test runs two at once):
# measured alone, the scaling tests used 139 s of CPU at 8 ms and 93 s at 100 ms.
GPU_BOUND: dict[str, Any] = {"model": "simulated_gpu", "triton_args": "--simulated-t0-ms 100"}


@contextlib.contextmanager
def own_stack(run_dir: Path, what: str, **settings: Any) -> Iterator[StackConfig]:
    config = config_on_free_ports(run_dir, **settings)
    table = ProcessTable(Path(config.run_dir))
    try:  # also an `up` cut short (Ctrl-C, SIGTERM: inferline_stack.reaper) is taken down
        if up(config, table) != 0:
            pytest.fail(f"the {what} stack did not start; see the log tail above")
        yield config
    finally:
        down(config, table)


def stack_fixture(
    what: str, scope: Literal["session", "module"] = "module", **settings: Any
) -> Any:
    """A ``scope`` fixture: a stack of its own with ``settings``, serving the session's model
    repository; its value is the stack's config (``public_port`` is Envoy's public listener)."""

    @pytest.fixture(scope=scope)
    def fixture(
        model_repository: Path, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[StackConfig]:
        run_dir = tmp_path_factory.mktemp(f"{what.replace(' ', '-')}-run")
        with own_stack(run_dir, what, model_repository=str(model_repository), **settings) as c:
            yield c

    return fixture
