"""Logging set up once, by a process's ``__main__``; library modules only call getLogger."""

from __future__ import annotations

import logging
import os

FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"


def setup(level: str | None = None) -> None:
    """Configure the root logger from ``level`` or ``INFERLINE_LOG_LEVEL`` (default INFO)."""
    name = (level or os.environ.get("INFERLINE_LOG_LEVEL", "INFO")).upper()
    if name not in logging.getLevelNamesMapping():
        raise ValueError(f"INFERLINE_LOG_LEVEL={name!r}: expected DEBUG, INFO, WARNING or ERROR")
    logging.basicConfig(level=name, format=FORMAT)
