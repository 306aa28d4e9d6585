"""Fixtures of the tools' tests: the cpu overlay as kubectl kustomize renders it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from inferline_testing.tools import tool
from tools.pods.manifests import Manifests

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def cpu() -> Manifests:
    """The objects of ``kubectl kustomize k8s/overlays/cpu``."""
    kubectl = tool("kubectl", "install kubectl 1.32 (it carries kustomize v5.5)")
    done = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "k8s" / "overlays" / "cpu")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return Manifests(o for o in yaml.safe_load_all(done.stdout) if o)
