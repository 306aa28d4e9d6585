"""What the monitoring tests share: grafana/ and the autoscaling rules, a rendered ConfigMap's
files, and promtool (Debian's prometheus package: without it a test skips, unless
INFERLINE_REQUIRE_TOOLS=1, where it fails)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from inferline_testing.prometheus import tool
from k8s.tests.manifests import K8S, ROOT, find

GRAFANA = ROOT / "grafana"
AUTOSCALING_RULES = K8S / "components" / "autoscaling" / "rules"


def run_promtool(*args: str, cwd: Path | None = None) -> str:
    command = [tool(), *args]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )
    output = f"{result.stdout}{result.stderr}".strip()
    assert result.returncode == 0, f"{' '.join(command)} exited {result.returncode}:\n{output}"
    return output


def configmap_data(objects: list[dict[str, Any]], name: str) -> dict[str, str]:
    data: dict[str, str] = find(objects, "ConfigMap", name)["data"]
    return data
