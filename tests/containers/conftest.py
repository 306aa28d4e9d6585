"""The pipeline as it deploys: every image built, the rendered cpu overlay run as podman pods.

``make test-containers`` runs this suite (``make test`` leaves it out: it builds images). The
session builds the 9 images of k8s/CONTRACT.md (stand-in bases where a base cannot be pulled),
then starts the pipeline's Deployments from ``kubectl kustomize`` output (tools.pods). Each
image's size, build time and time to ready are collected and printed at the end as one table
(also build/containers/report.md).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferline_testing.tools import missing
from tests.containers.support import (
    FIGURES,
    PIPELINE,
    REGISTRY,
    ROWS,
    TAG,
    record_pods,
    reference,
    render,
    table,
)
from tools import images
from tools.containers import checks, standins
from tools.containers.engine import Engine, EngineError, find_engine
from tools.pods.runner import Cluster

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "build" / "containers" / "report.md"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not any(row.built for row in ROWS.values()):
        return
    text = table()
    if FIGURES:
        text += "\n\n" + "\n".join(f"- {what}: {figure}" for what, figure in FIGURES.items())
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(f"# make test-containers\n\n{text}\n", "utf-8")
    terminalreporter.write_sep("=", "images and pods (make test-containers)")
    terminalreporter.write_line(text)


@pytest.fixture(scope="session")
def engine() -> Engine:
    if shutil.which("podman") is None:
        missing("podman is not installed: apt-get install podman buildah runc catatonit")
    try:
        return find_engine("podman")
    except EngineError as e:
        missing(str(e))


@pytest.fixture(scope="session")
def built(engine: Engine) -> dict[str, str]:
    """Every image of the contract, built now (the layer cache makes a repeat quick): name ->
    reference."""
    seconds = images.build(engine, REGISTRY, TAG)
    for name, row in ROWS.items():
        facts = checks.facts(engine, reference(name))
        row.built, row.size_bytes, row.build_s = True, facts.size_bytes, seconds.get(name)
    return {name: reference(name) for name in ROWS}


@pytest.fixture(scope="session")
def pipeline(
    engine: Engine, built: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """The pipeline's pods, up for the session; stopped and removed at its end."""
    standins.ensure(engine, [standins.TRITON])
    pods = Cluster(engine, render(), tmp_path_factory.mktemp("pods"))
    pods.down()  # what an interrupted run left
    try:
        pods.up(PIPELINE)
        record_pods(pods)
        yield pods
    finally:
        pods.down()
