"""The images' build context: the .dockerignore keeps it small without dropping what a Dockerfile
of k8s/CONTRACT.md copies (Docker's reading of the file, evaluated here; no engine needed)."""

from __future__ import annotations

import functools
import re
import subprocess

import pytest

from inferline_testing.tools import missing
from k8s.tests.dockerfiles import IMAGES, ROOT, image_stages

# --- the build context ---------------------------------------------------------------------------


@functools.cache
def dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """(exclude?, regex) per line of .dockerignore, in Docker's terms: patterns are paths from
    the context root in Go's filepath.Match syntax plus ``**``; ``!`` re-includes."""
    rules = []
    for raw in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        parts = line.lstrip("!").strip("/").split("/")
        regex = ""
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            if part == "**":
                regex += ".*" if last else "(?:[^/]+/)*"
                continue
            segment = "".join(
                "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in part
            )
            regex += segment + ("" if last else "/")
        rules.append((not negate, re.compile(regex)))
    return rules


def excluded(path: str) -> bool:
    """Whether Docker leaves ``path`` out of the context: the last rule matching the path or
    one of its parent directories decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for exclude, regex in dockerignore_rules():
        if any(regex.fullmatch(c) for c in candidates):
            verdict = exclude
    return verdict


@pytest.mark.parametrize(
    "path",
    [
        ".git/HEAD", ".venv/bin/python", ".run/endpoints.yaml", "build/check-packages/eds.log",
        "build/check-packages/wheels/x.whl", "services/middleman/tests/test_x.py",
        "preflight/tests/conftest.py", "common/inferline_common.egg-info/PKG-INFO",
        "common/inferline/__pycache__/config.cpython-311.pyc", ".mypy_cache/x", "k8s/base/x.yaml",
        "build/model_repository/.efficientnet_lite0.abc123/1/model.onnx", "common/build/lib/x.py",
        "fuzz/regressions/decode/x", "build/fuzz/decode/corpus/x",
    ],
)  # fmt: skip
def test_dockerignore_keeps_the_context_small(path: str) -> None:
    assert excluded(path), f"{path} would be sent to the engine"


def _copied_sources() -> set[str]:
    """What the images copy from the context: each image's Dockerfile read with its build
    arguments (docker/python.Dockerfile's ``COPY ${DIST}/``)."""
    sources: set[str] = set()
    for image in IMAGES:
        for stage in image_stages(image):
            for instruction in stage.instructions:
                if instruction.keyword == "COPY" and "from" not in instruction.flags():
                    sources.update(o.rstrip("/") for o in instruction.operands()[:-1])
    return sources


def test_dockerignore_keeps_what_the_dockerfiles_copy() -> None:
    sources = _copied_sources()
    assert {"constraints.txt", "common", "build/model_repository"} <= sources
    assert {i.distribution for i in IMAGES if i.python} <= sources
    assert not [s for s in sources if "$" in s], sources  # every build argument in place
    for source in sources:
        assert not excluded(source), source
    assert not excluded("build/model_repository/efficientnet_lite0/1/model.onnx")
    assert not excluded("build/model_repository/efficientnet_lite0/config.pbtxt")
    # Every tracked file of what the images install, but tests, reaches the context (package
    # data included, such as Envoy's template).
    listed = subprocess.run(
        ["git", "ls-files", "--", *sorted(sources - {"build/model_repository"})],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if listed.returncode != 0:
        missing(f"not a git checkout: {listed.stderr.strip()}")
    for path in listed.stdout.splitlines():
        if "/tests/" not in path:
            assert not excluded(path), f"{path} is left out of the build context"
