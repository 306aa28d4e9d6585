"""What every command shares: kubectl, the namespace, the failure and the step messages."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

NAMESPACE = "inferline"  # the manifests' own (k8s/base); --namespace for another
# A namespace's name: a DNS label (RFC 1123), as Kubernetes requires it.
NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


class ClusterError(Exception):
    """A step failed; the message says what was expected and what was seen."""


def check_namespace(namespace: str) -> None:
    if not NAMESPACE_NAME.fullmatch(namespace):
        raise ClusterError(
            f"namespace {namespace!r}: a DNS label (lower-case letters, digits and '-', at most "
            "63, starting and ending with a letter or digit)"
        )


def kubectl(*args: str, input_text: str | None = None, check: bool = True) -> str:
    """Run kubectl; its stdout. ClusterError with its stderr when it fails and ``check``."""
    binary = shutil.which("kubectl")
    if binary is None:
        raise ClusterError("kubectl is not on PATH: install it and point it at your cluster")
    result = subprocess.run(
        [binary, *args], input=input_text, capture_output=True, text=True, check=False
    )
    if check and result.returncode != 0:
        raise ClusterError(f"kubectl {' '.join(args)} failed:\n{result.stderr.strip()}")
    return result.stdout


def step(message: str) -> None:
    sys.stderr.write(f"[verify-cluster] {message}\n")
    sys.stderr.flush()
