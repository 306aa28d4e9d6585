"""Shared by the benchmarks: how each runs (nothing it starts outlives it), the local stack on
free ports, the demo client, test photos as JPEGs, result files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from inferline_stack import reaper
from inferline_stack.config import StackConfig
from inferline_stack.processes import ProcessTable
from inferline_stack.stack import down, up
from inferline_testing import media
from inferline_testing.overload.scenario import SIMULATED
from inferline_testing.ports import config_on_free_ports

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
PHOTOS = ("chelsea", "coffee", "astronaut", "rocket")  # scikit-image's bundled photos


def run_main(main: Callable[[], int | None]) -> int:
    """A benchmark's ``main``, run so that nothing it starts outlives it: every process it
    starts carries its owner token, and however it ends (done, an exception, SIGTERM, SIGHUP,
    Ctrl-C) what still runs is stopped (:mod:`inferline_stack.reaper`). Its exit status; 128 +
    the signal's number when one stopped it::

        if __name__ == "__main__":
            sys.exit(run_main(main))
    """
    try:
        with reaper.owning(f"bench-{os.getpid()}"):
            return main() or 0
    except KeyboardInterrupt as stopped:
        signum = stopped.signum if isinstance(stopped, reaper.Terminated) else signal.SIGINT
        name = signal.Signals(signum).name
        print(f"stopped by {name}; so is everything it started", file=sys.stderr)
        return 128 + signum


def jpegs(count: int, width: int, height: int, qualities: tuple[int, ...]) -> list[bytes]:
    """``count`` JPEGs of real photos at ``width`` x ``height``: the photos round-robin, every
    other round mirrored, the JPEG quality cycling through ``qualities``."""
    out = []
    for i in range(count):
        rgb = media.photo_at(PHOTOS[i % len(PHOTOS)], width, height)
        if (i // len(PHOTOS)) % 2:
            rgb = rgb[:, ::-1]
        quality = qualities[i % len(qualities)]
        out.append(media.encode(np.ascontiguousarray(rgb), "JPEG", quality=quality))
    return out


@contextmanager
def local_stack(run_dir: Path, **overrides: Any) -> Iterator[StackConfig]:
    """The local stack on free ports (every hop through Envoy), stopped on exit.

    ``overrides``: any StackConfig field, e.g. ``batcher=False`` (middleman -> Envoy ->
    Triton), ``placement="in-process"``, ``model="simulated_gpu"``.
    """
    config = config_on_free_ports(run_dir, **overrides)
    table = ProcessTable(run_dir)
    try:
        if up(config, table) != 0:
            raise SystemExit("the local stack did not start")
        yield config
    finally:
        down(config, table)


@contextmanager
def overload_stack(model: str, name: str, **settings: Any) -> Iterator[StackConfig]:
    """The local stack for the overload benchmarks: ``model`` ``simulated`` (the slow simulated
    GPU of inferline_testing.overload.scenario) or ``real`` (EfficientNet-Lite0 on the CPU);
    ``settings``: more StackConfig fields."""
    overrides = {**(dict(SIMULATED) if model == "simulated" else {}), **settings}
    repository = str(ROOT / "build" / "model_repository")
    with (
        tempfile.TemporaryDirectory(prefix=f"inferline-{name}-") as tmp,
        local_stack(Path(tmp), model_repository=repository, **overrides) as config,
    ):
        yield config


def demo_client(target: str, duration: float, concurrency: int, *extra: str) -> dict[str, Any]:
    """Run the demo client as its own process (as a user would) and return its JSON summary."""
    argv = [sys.executable, "-m", "demo_client", "load", "--target", target, "--json"]
    argv += ["--duration", str(duration), "--concurrency", str(concurrency), *extra]
    done = subprocess.run(argv, check=True, capture_output=True, text=True)
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def write_result(name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    return path
