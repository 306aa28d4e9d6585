"""What each Python image carries that its process never imports.

    python -m tools.containers.weight [--registry localhost/inferline] [--tag dev] [--seconds 20]

Runs the rendered cpu overlay's pipeline as pods (tools.pods) with ``PYTHONPROFILEIMPORTTIME=1``
in every container, drives the demo client's image at it for ``--seconds`` (so what a request
imports is imported too), runs each preStop hook, stops it, and reads each process's imported
modules from its log (init containers' too). The
images the cpu overlay does not run start on their own: the DALI preprocess (DALI on the CPU) and
the preflight. Then, in each image, every installed distribution is sized from its RECORD, and
those none of whose top-level modules any process imported are listed: weight the image carries
for nothing. (A distribution that shares a namespace package, ``google`` or ``nvidia``, counts
as imported when any of them is.)
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from tools.containers.engine import Engine, EngineError, find_engine
from tools.pods.__main__ import render
from tools.pods.runner import Cluster

ROOT = Path(__file__).resolve().parents[2]
IMPORT = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*([\w.]+)\s*$")
# Sizes each installed distribution of an image (its RECORD) and its top-level modules.
INVENTORY = r"""
import importlib.metadata as md, json
rows = []
for dist in md.distributions():
    files = dist.files or []
    tops = set((dist.read_text("top_level.txt") or "").split())
    if not tops:
        for f in files:
            first = f.parts[0] if f.parts else ""
            if first and not first.endswith((".dist-info", ".data", ".libs")) and first != "..":
                tops.add(first.removesuffix(".py").split(".")[0])
    size = sum(f.size or 0 for f in files)
    rows.append({"name": dist.metadata["Name"], "size": size, "tops": sorted(tops)})
print(json.dumps(rows))
"""


def imported(log: str) -> set[str]:
    """The top-level modules a process imported, from its ``-X importtime`` lines."""
    return {m.group(1).split(".")[0] for line in log.splitlines() if (m := IMPORT.match(line))}


def inventory(engine: Engine, image: str) -> list[dict[str, object]]:
    done = engine.run("run", "--rm", "--entrypoint", "python", image, "-c", INVENTORY, timeout=120)
    rows: list[dict[str, object]] = json.loads(done.stdout)
    return rows


def unused(rows: Iterable[dict[str, object]], modules: set[str]) -> list[tuple[str, int]]:
    """(distribution, bytes) of those no top-level module of which was imported, largest first."""
    found = []
    for row in rows:
        tops = set(row["tops"]) if isinstance(row["tops"], list) else set()
        if tops and not tops & modules:
            found.append((str(row["name"]), int(str(row["size"]))))
    return sorted(found, key=lambda r: -r[1])


def pipeline_imports(
    engine: Engine, registry: str, tag: str, seconds: float
) -> dict[str, set[str]]:
    """image -> modules its containers imported, in the cpu overlay's pods under load."""
    manifests = render("cpu", registry, tag, "inferline-weight")
    run_dir = ROOT / ".run" / "weight"
    pods = Cluster(engine, manifests, run_dir, extra_env={"PYTHONPROFILEIMPORTTIME": "1"})
    found: dict[str, set[str]] = collections.defaultdict(set)
    pods.down()
    try:
        pods.up(("eds", "envoy", "triton", "batcher", "middleman"))
        client = f"{registry}/inferline-demo-client:{tag}"
        load = engine.run(
            "run", "--rm", f"--network={pods.network}", "--workdir=/tmp",
            "--env=PYTHONPROFILEIMPORTTIME=1", client, "load", "--json", "--target",
            "envoy:8080", "--duration", str(seconds), timeout=seconds + 180,
        )  # fmt: skip
        found[client] |= imported(load.stderr)
        for record in pods.records.values():
            pod = manifests.pod(record.deployment, record.index)
            for container in (*pod.init_containers, *pod.containers):
                name = f"{record.name}-{container.name}"
                logs = engine.run("logs", name, check=False)
                found[container.image] |= imported(logs.stdout + logs.stderr)
                if container.pre_stop:  # what the hook imports (it runs again at the stop)
                    hook = engine.run(
                        "exec", "--env=PYTHONPROFILEIMPORTTIME=1", name, *container.pre_stop,
                        check=False, timeout=120,
                    )  # fmt: skip
                    found[container.image] |= imported(hook.stderr)
    finally:
        pods.down()
    return found


def alone(engine: Engine, image: str, seconds: float, *args: str) -> set[str]:
    """The modules an image's process imports in ``seconds`` on its own (then SIGINT)."""
    done = engine.run(
        "run", "--rm", "--env=PYTHONPROFILEIMPORTTIME=1", *args, "--entrypoint=timeout", image,
        "-s", "INT", str(seconds), *entrypoint(engine, image), check=False,
        timeout=seconds + 60,
    )  # fmt: skip
    return imported(done.stderr)


def entrypoint(engine: Engine, image: str) -> list[str]:
    argv: list[str] | None = json.loads(
        engine.run("image", "inspect", "--format", "{{json .Config.Entrypoint}}", image).stdout
    )
    return argv or []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.containers.weight", description=__doc__)
    parser.add_argument("--registry", default="localhost/inferline")
    parser.add_argument("--tag", default="dev")
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args(argv)
    try:
        engine = find_engine("podman")
        found = pipeline_imports(engine, args.registry, args.tag, args.seconds)
        gpu = f"{args.registry}/inferline-preprocess-gpu:{args.tag}"
        found[gpu] = alone(engine, gpu, args.seconds, "--env=INFERLINE_PREPROCESS_BACKEND=dali-cpu")
        preflight = f"{args.registry}/inferline-preflight:{args.tag}"
        found[preflight] = alone(engine, preflight, args.seconds)
        for image, modules in sorted(found.items()):
            try:
                rows = inventory(engine, image)
            except EngineError:
                continue  # no Python in it: the models' (busybox), Triton's
            total = sum(int(str(r["size"])) for r in rows)
            waste = unused(rows, modules)
            print(f"{image}: {total / 1e6:.0f} MB of Python distributions, "
                  f"{sum(s for _, s in waste) / 1e6:.0f} MB never imported")  # fmt: skip
            for name, size in waste:
                if size >= 100_000:
                    print(f"  {size / 1e6:7.1f} MB  {name}")
    except EngineError as e:
        print(f"weight: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
