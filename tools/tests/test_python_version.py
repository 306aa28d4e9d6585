"""One supported Python, stated alike everywhere it is stated: every distribution's
``requires-python``, the images' base, and the check at the top of ``.ci/run`` all say 3.11, the
one version tested (PyTriton's Python backend stub and the pinned torch wheel are built for it)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[2]
SUPPORTED = "3.11"


def ours(pattern: str) -> list[Path]:
    """The repository's own files matching ``pattern`` (not the virtual environments', nor
    what a build left)."""
    return sorted(
        path
        for path in ROOT.glob(pattern)
        if not any(part.startswith(".") or part == "build" for part in path.relative_to(ROOT).parts)
    )


def test_every_distribution_requires_the_one_supported_python() -> None:
    stated = {
        str(path.relative_to(ROOT)): tomllib.loads(path.read_text())["project"]["requires-python"]
        for path in ours("**/pyproject.toml")
        if "project" in tomllib.loads(path.read_text())
    }
    assert len(stated) >= 11, stated
    for path, spec in stated.items():
        allowed = SpecifierSet(spec)
        assert f"{SUPPORTED}.0" in allowed and f"{SUPPORTED}.11" in allowed, path
        assert "3.10.14" not in allowed and "3.12.0" not in allowed, (path, spec)


def test_the_images_and_ci_run_the_same_python() -> None:
    bases = {
        match.group(1)
        for dockerfile in [*ours("**/Dockerfile"), *ours("**/*.Dockerfile")]
        for match in re.finditer(r"^FROM python:(\d+\.\d+)", dockerfile.read_text(), re.M)
    }
    assert bases == {SUPPORTED}
    assert f"python{SUPPORTED}" in (ROOT / ".ci" / "run").read_text()
