"""Debian's chromium, driven by playwright (no browser is downloaded): what a test that loads a
page needs. Skipped without either, failed instead where tools are required (CI)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

from inferline_testing import tools


def launch_args() -> dict[str, Any]:
    """``playwright.chromium.launch``'s arguments for the system chromium."""
    path = tools.tool("chromium", "install Debian's package: apt-get install chromium")
    if importlib.util.find_spec("playwright") is None:
        tools.missing("playwright is not installed: make setup (requirements-dev.txt)")
    return {"executable_path": path, "args": ["--no-sandbox"]}


SCREENSHOTS_ENV = "INFERLINE_SCREENSHOTS"  # `make screenshots` sets docs/images
ROOT = Path(__file__).resolve().parents[2]


def screenshot_path(name: str) -> Path:
    """Where a browser test keeps its screenshot ``name``: ``$INFERLINE_SCREENSHOTS`` (the docs'
    images, refreshed by ``make screenshots``), else build/artifacts; the folder made."""
    folder = Path(os.environ.get(SCREENSHOTS_ENV) or ROOT / "build" / "artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name
