"""What an image must not carry, found by reading its file system (podman mounts it).

A runtime image holds its process and what that process loads: no compiler, no pip cache, no
test file of the project's own, no pip or setuptools in its environment (the build stage
installed with them; nothing installs at run time).

``python -m tools.containers.checks REF ...`` prints what each image carries that it must not.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from tools.containers.engine import Engine, EngineError, find_engine

COMPILERS = ("gcc", "cc", "c++", "g++", "clang", "clang++", "ld", "make")
BIN_DIRS = ("usr/bin", "usr/local/bin", "bin", "opt/venv/bin")
# The project's own packages (k8s/CONTRACT.md's images install them into /opt/venv).
OWN = re.compile(
    r"site-packages/(inferline|middleman|preprocess|batcher|eds|inferline_envoy|demo_client|"
    r"inferline_models|inferline_preflight)/(.*/)?(tests?|test_[^/]*\.py|conftest\.py)$"
)
# (wheel is not among them: a runtime dependency of DALI's astunparse)
INSTALLERS = ("pip", "setuptools", "pkg_resources", "_distutils_hack")


@dataclasses.dataclass(frozen=True)
class Facts:
    reference: str
    size_bytes: int
    user: str
    labels: dict[str, str]
    entrypoint: list[str]
    ports: set[int]  # EXPOSEd, all TCP


def facts(engine: Engine, reference: str) -> Facts:
    inspected = json.loads(engine.run("image", "inspect", reference).stdout)[0]
    config = inspected.get("Config") or {}
    return Facts(
        reference=reference,
        size_bytes=int(inspected.get("Size", 0)),
        user=str(config.get("User", "")),
        labels=dict(config.get("Labels") or {}),
        entrypoint=list(config.get("Entrypoint") or []),
        ports={int(p.removesuffix("/tcp")) for p in config.get("ExposedPorts") or {}},
    )


@contextlib.contextmanager
def mounted(engine: Engine, reference: str) -> Iterator[Path]:
    """The image's file system, read-only, for the block (rootful podman's ``image mount``)."""
    path = engine.run("image", "mount", reference).stdout.strip()
    try:
        yield Path(path)
    finally:
        engine.run("image", "unmount", reference, check=False)


def unwanted(rootfs: Path) -> list[str]:
    """What a runtime image carries that it must not, as paths in the image."""
    found = []
    for folder in BIN_DIRS:
        for name in COMPILERS:
            if (rootfs / folder / name).exists():
                found.append(f"/{folder}/{name} (a compiler or build tool)")
    for cache in rootfs.glob("**/.cache/pip"):
        found.append(f"/{cache.relative_to(rootfs)} (pip's cache)")
    for site in rootfs.glob("opt/venv/lib/python3*/site-packages"):
        for path in site.rglob("*"):
            relative = path.relative_to(rootfs).as_posix()
            if OWN.search(relative):
                found.append(f"/{relative} (a test of the project's)")
        for installer in INSTALLERS:
            if (site / installer).is_dir():
                found.append(f"/{(site / installer).relative_to(rootfs)} (an installer)")
    return sorted(found)


def size_mb(size_bytes: int) -> str:
    return f"{size_bytes / 1e6:.0f} MB"


def main(argv: Sequence[str] | None = None) -> int:
    references = list(sys.argv[1:] if argv is None else argv)
    try:
        engine = find_engine("podman")
        found = 0
        for reference in references:
            with mounted(engine, reference) as rootfs:
                for what in unwanted(rootfs):
                    print(f"{reference}: {what}")
                    found += 1
    except EngineError as e:
        print(f"checks: {e}", file=sys.stderr)
        return 2
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
