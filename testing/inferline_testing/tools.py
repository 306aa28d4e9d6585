"""External tools a test needs (promtool, prometheus, kubectl, checkov, …).

They are optional for a developer: a test that needs a missing one skips, saying how to
install it, unless ``INFERLINE_REQUIRE_TOOLS=1`` (CI sets it: there a missing tool fails the
run rather than skipping what it should prove).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

REQUIRE_ENV = "INFERLINE_REQUIRE_TOOLS"


def required() -> bool:
    return os.environ.get(REQUIRE_ENV) == "1"


def missing(message: str) -> NoReturn:
    """Skip with ``message``, or fail with it where tools are required: every skip of a test
    for what this machine lacks goes through here."""
    if required():
        pytest.fail(f"{message} ({REQUIRE_ENV}=1)")
    pytest.skip(message)


@contextlib.contextmanager
def missing_on(*errors: type[Exception]) -> Iterator[None]:
    """One of ``errors`` raised in the block (this machine lacks what it needs: a codec, an
    encoder) is :func:`missing`, with its message."""
    try:
        yield
    except errors as exc:
        missing(str(exc))


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
    return found
