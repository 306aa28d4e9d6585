"""External tools a test needs (promtool, prometheus, kubectl, checkov, …).

They are optional for a developer: a test that needs a missing one skips, saying how to
install it, unless ``INFERLINE_REQUIRE_TOOLS=1`` (CI sets it: there a missing tool fails the
run rather than skipping what it should prove).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REQUIRE_ENV = "INFERLINE_REQUIRE_TOOLS"


def required() -> bool:
    return os.environ.get(REQUIRE_ENV) == "1"


def missing(message: str) -> None:
    """Skip with ``message``, or fail with it where tools are required."""
    if required():
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)")
    pytest.skip(message)


def tool(name: str, install: str, at: Path | None = None) -> str:
    """The path of ``name`` (on PATH, or the executable ``at``); skips or fails without it."""
    if at is not None:
        if at.is_file() and os.access(at, os.X_OK):
            return str(at)
        found = None
    else:
        found = shutil.which(name)
    if found is None:
        missing(f"{name} is not installed: {install}")
    assert found is not None
    return found
