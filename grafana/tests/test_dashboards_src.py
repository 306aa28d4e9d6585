"""The dashboards' JSON is what their Python (grafana/dashboards_src) renders: regenerated in
memory and compared with the committed files, which `make dashboards` rewrites."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from grafana.dashboards_src import generate
from grafana.dashboards_src.__main__ import main
from grafana.tests.dashboards import DASHBOARDS, DASHBOARDS_DIR


def test_the_committed_json_is_what_the_python_renders() -> None:
    stale = generate.stale()
    assert stale == [], (
        f"grafana/dashboards/{', '.join(stale)} differ from what grafana/dashboards_src renders: "
        "run `make dashboards` (edit the Python, never the JSON)"
    )


def test_every_dashboard_file_is_rendered() -> None:
    assert set(generate.BUILDERS) == set(DASHBOARDS.values())
    assert {path.name for path in DASHBOARDS_DIR.glob("*.json")} == set(generate.BUILDERS)


RENDER = (
    "import json, sys; from grafana.dashboards_src import generate; "
    "json.dump(generate.render(), sys.stdout)"
)


@pytest.mark.parametrize("seed", ["1", "2"])
def test_rendering_is_the_same_in_another_process_whatever_its_hash_seed(seed: str) -> None:
    """Set and dict order must not leak into the files: another interpreter with another hash
    seed renders byte for byte what this one does (and what is committed)."""
    env = {**os.environ, "PYTHONHASHSEED": seed}
    rendered = subprocess.run(
        [sys.executable, "-c", RENDER], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(rendered) == generate.render()


def test_check_fails_while_a_file_is_stale_and_writing_fixes_it(tmp_path: Path) -> None:
    assert sorted(generate.stale(tmp_path)) == sorted(generate.BUILDERS)
    assert sorted(generate.write(tmp_path)) == sorted(generate.BUILDERS)
    assert generate.stale(tmp_path) == []
    (tmp_path / "gpu.json").write_text("{}\n", encoding="utf-8")
    assert generate.stale(tmp_path) == ["gpu.json"]
    assert generate.write(tmp_path) == ["gpu.json"]
    assert (tmp_path / "gpu.json").read_text(encoding="utf-8") == generate.render()["gpu.json"]


def test_the_command_checks_the_committed_files() -> None:
    assert main(["--check"]) == 0
