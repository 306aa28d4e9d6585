"""checkov on the rendered manifests (both overlays, and the base with every component in each
placement): no failed check but the documented ones below, and no suppression without its reason.

Suppressions are of two kinds, both explained:
* inline, on the object that needs it: a ``checkov.io/skip<n>: CKV_K8S_xx=<why>`` annotation —
  checkov reports each as skipped with its reason, and the test fails on one without a reason;
* DOCUMENTED, here: checks that fail by design for every workload, with the reason.

checkov lives in a tool environment of its own, ``.venv-checkov`` (its pins conflict with
constraints.txt), installed from the lock k8s/checkov.lock:

    python3 -m venv .venv-checkov && .venv-checkov/bin/pip install --no-deps -r k8s/checkov.lock

Without it the test skips, saying so, unless INFERLINE_REQUIRE_TOOLS=1 (CI), where it fails.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from inferline_testing import tools
from k8s.tests.manifests import EVERYTHING_BY_PLACEMENT, OVERLAYS, ROOT, render_text

CHECKOV = ROOT / ".venv-checkov" / "bin" / "checkov"
INSTALL = (
    "python3 -m venv .venv-checkov && .venv-checkov/bin/pip install --no-deps -r k8s/checkov.lock"
)
TARGETS = {
    **{overlay: f"overlays/{overlay}" for overlay in OVERLAYS},
    **{target.replace("/", "-"): target for target in EVERYTHING_BY_PLACEMENT},
}

# Checks that fail for every workload by design, and why.
DOCUMENTED = {
    "CKV_K8S_43": (
        "Image should use digest: the images are referenced by version tag, and `make deploy` "
        "writes the registry and tag of the images it built; the digests exist only once they "
        "are pushed, so pinning them belongs in the deploy-time kustomization "
        "(kustomize `images[].digest`), not in these templates."
    ),
    "CKV_K8S_15": (
        "Image pull policy should be Always: IfNotPresent, with immutable version tags. Always "
        "would break kind and minikube, whose images are loaded into the node with no registry "
        "to pull from; what Always guards against (a pod using a private image another tenant "
        "pulled, without credentials) is the AlwaysPullImages admission plugin's job, a cluster "
        "setting."
    ),
}
MIN_REASON = 20  # characters: a reason, not a placeholder


def checkov() -> str:
    return tools.tool("checkov", INSTALL, at=CHECKOV)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    binary = checkov()
    folder = tmp_path_factory.mktemp("checkov")
    for name, target in TARGETS.items():
        (folder / f"{name}.yaml").write_text(render_text(target), encoding="utf-8")
    command = [
        str(binary), "--directory", str(folder), "--framework", "kubernetes",
        "--output", "json", "--skip-download",  # nothing from Prisma Cloud: offline, reproducible
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    # Exit status 1 means failed checks, which the tests below judge; anything else is an error.
    assert result.returncode in (0, 1), f"checkov exited {result.returncode}:\n{result.stderr}"
    data = json.loads(result.stdout)
    [kubernetes] = data if isinstance(data, list) else [data]
    assert kubernetes["check_type"] == "kubernetes"
    summary = kubernetes["summary"]
    assert summary["parsing_errors"] == 0, summary
    assert summary["resource_count"] > 0, summary
    results: dict[str, Any] = kubernetes["results"]
    return results


def where(check: dict[str, Any]) -> str:
    return f"{check['check_id']} {check['resource']} ({Path(check['file_path']).name})"


def test_no_check_fails_but_the_documented_ones(report: dict[str, Any]) -> None:
    failed = [c for c in report["failed_checks"] if c["check_id"] not in DOCUMENTED]
    assert not failed, "checkov failures:\n" + "\n".join(
        f"{where(c)}: {c['check_name']}" for c in failed
    )


def test_every_documented_suppression_is_still_needed(report: dict[str, Any]) -> None:
    failing = {c["check_id"] for c in report["failed_checks"]}
    assert set(DOCUMENTED) <= failing, f"no longer failing: {set(DOCUMENTED) - failing}"
    for check, reason in DOCUMENTED.items():
        assert len(reason) >= MIN_REASON, check


def test_every_inline_suppression_has_its_reason(report: dict[str, Any]) -> None:
    unexplained = [
        where(c)
        for c in report["skipped_checks"]
        if len((c["check_result"].get("suppress_comment") or "").strip()) < MIN_REASON
    ]
    assert not unexplained, "suppressed without a reason:\n" + "\n".join(unexplained)
    assert report["passed_checks"], "checkov checked nothing"
