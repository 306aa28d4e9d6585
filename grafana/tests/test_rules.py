"""The recording and alerting rules: `promtool check rules` on the rule files, `promtool test rules`
on every unit-test file under grafana/rules/tests/, and that those files test every rule.

promtool comes with Debian's `prometheus` package. Without it the promtool tests are skipped, unless
INFERLINE_REQUIRE_TOOLS=1 (CI sets it), where they fail.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferline_testing.prometheus import tool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "grafana" / "rules"
RULE_FILES = (RULES / "recording.yml", RULES / "alerts.yml")
TEST_FILES = sorted((RULES / "tests").glob("*.yml"))


def run_promtool(*args: str) -> None:
    """Runs promtool; on failure the assertion shows its whole output."""
    command = [tool(), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    output = f"{result.stdout}{result.stderr}".strip()
    assert result.returncode == 0, f"{' '.join(command)} exited {result.returncode}:\n{output}"


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path}: not a mapping"
    return data


def rules() -> list[dict[str, Any]]:
    return [
        rule for path in RULE_FILES for group in load(path)["groups"] for rule in group["rules"]
    ]


def test_the_rule_files_and_tests_exist() -> None:
    for path in RULE_FILES:
        assert path.is_file(), f"{path} is missing"
    assert TEST_FILES, f"no unit tests under {RULES / 'tests'}"


def test_promtool_check_rules() -> None:
    run_promtool("check", "rules", *(str(path) for path in RULE_FILES))


@pytest.mark.parametrize("test_file", TEST_FILES, ids=lambda path: path.name)
def test_promtool_test_rules(test_file: Path) -> None:
    run_promtool("test", "rules", str(test_file))


def test_every_recording_rule_has_a_test() -> None:
    """Each recorded name appears in some test file's promql_expr_test."""
    exprs = [
        str(case["expr"])
        for path in TEST_FILES
        for group in load(path).get("tests", [])
        for case in group.get("promql_expr_test", [])
    ]
    records = {rule["record"] for rule in rules() if "record" in rule}
    untested = sorted(name for name in records if not any(name in expr for expr in exprs))
    assert not untested, f"recording rules no promql_expr_test evaluates: {untested}"


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    """Each alert has an alert_rule_test where it fires and one where it does not."""
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in TEST_FILES:
        for group in load(path).get("tests", []):
            for case in group.get("alert_rule_test", []):
                (firing if case.get("exp_alerts") else quiet).add(str(case["alertname"]))
    alerts = {rule["alert"] for rule in rules() if "alert" in rule}
    assert not alerts - firing, f"alerts never tested firing: {sorted(alerts - firing)}"
    assert not alerts - quiet, f"alerts never tested quiet: {sorted(alerts - quiet)}"


def test_every_alert_is_actionable() -> None:
    """`for:`, a severity, a summary and a description on every alert."""
    for rule in rules():
        if "alert" not in rule:
            continue
        name = rule["alert"]
        assert "for" in rule, f"{name}: no `for:`"
        assert rule.get("labels", {}).get("severity") in {"critical", "warning"}, name
        annotations = rule.get("annotations", {})
        assert annotations.get("summary") and annotations.get("description"), name


def test_every_alert_links_its_runbook_section() -> None:
    """runbook_url is docs/runbooks.md's section for the alert, and that section exists."""
    page = ROOT / "docs" / "runbooks.md"
    headings = {
        line.removeprefix("## ").strip().lower()
        for line in page.read_text(encoding="utf-8").splitlines()
        if line.startswith("## ")
    }
    for rule in rules():
        if "alert" not in rule:
            continue
        url = rule["annotations"].get("runbook_url", "")
        assert url == f"docs/runbooks.md#{rule['alert'].lower()}", rule["alert"]
        assert url.split("#")[1] in headings, f"docs/runbooks.md has no section {rule['alert']}"
