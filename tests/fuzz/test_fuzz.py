"""The fuzz targets in CI: a short pass of each (nothing found), and every input a fuzzing run has
found, replayed through its target (``fuzz/regressions/<target>/<name>``).

``make fuzz`` is the long run (FUZZ_SECONDS per target); here each target gets
``INFERLINE_FUZZ_SECONDS`` (5 by default: a smoke pass, the depth is ``make fuzz``'s), from its
seeds and the regressions, in a fresh work folder: a fresh clone's run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fuzz import __main__ as fuzz_cli
from fuzz import runner
from fuzz.targets import TARGETS
from inferline_testing import tools

SECONDS = int(os.environ.get("INFERLINE_FUZZ_SECONDS", "5"))
REGRESSIONS = sorted(p for p in runner.REGRESSIONS.glob("*/*") if p.is_file())


def tail(path: Path | None, lines: int = 60) -> str:
    if path is None:
        return ""
    return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_a_short_fuzzing_pass_finds_nothing(name: str, tmp_path: Path) -> None:
    result = runner.run(name, SECONDS, tmp_path)
    if result.skipped:
        tools.missing(result.skipped)
    print(result.summary())
    assert result.ok, f"{result.summary()}\n{tail(result.log)}"
    assert result.executions, f"no input ran:\n{tail(result.log)}"


def test_every_regression_belongs_to_a_target() -> None:
    assert {p.parent.name for p in REGRESSIONS} <= set(TARGETS)


@pytest.mark.parametrize("name", sorted({p.parent.name for p in REGRESSIONS}))
def test_every_found_input_runs_clean(name: str) -> None:
    """Each target's found inputs, replayed in one process of the target's (libFuzzer names
    each input as it runs it, so the output says which one failed)."""
    target = TARGETS[name]
    if reason := target.unavailable():
        tools.missing(reason)
    done = runner.reproduce(name, [p for p in REGRESSIONS if p.parent.name == name])
    assert done.returncode == 0, done.stdout[-6000:]


def test_figures_are_read_from_libfuzzer_output() -> None:
    output = (
        "#2\tINITED cov: 10 ft: 12 corp: 3/1Kb exec/s: 0 rss: 90Mb\n"
        "#4096\tpulse  cov: 200 ft: 340 corp: 40/20Kb lim: 4096 exec/s: 2048 rss: 110Mb\n"
        "#9000\tNEW    cov: 231 ft: 388 corp: 41/21Kb lim: 4096 exec/s: 3000 rss: 111Mb L: 5/9\n"
        "Done 9000 runs in 3 second(s)\n"
        "stat::number_of_executed_units: 9001\n"
        "stat::average_exec_per_sec:     3000\n"
        "stat::new_units_added:          38\n"
        "stat::slowest_unit_time_sec:    0\n"
        "stat::peak_rss_mb:              111\n"
    )
    result = runner.Result("t", returncode=0)
    runner.read_figures(output, result)
    assert (result.executions, result.exec_per_s, result.coverage) == (9001, 3000, 231)
    assert (result.features, result.corpus, result.new_units) == (388, 41, 38)
    assert (result.peak_rss_mb, result.slowest_s) == (111, 0)
    assert result.ok


@pytest.mark.parametrize("require", ["", "1"], ids=["developer", "tools required"])
def test_a_skipped_target_is_reported_as_skipped_and_fails_under_the_switch(
    require: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(tools.REQUIRE_ENV, require)
    monkeypatch.setattr(runner, "run", lambda name, *_: runner.Result(name, skipped="x is gone"))
    assert fuzz_cli.main(["run", "rest", "--seconds", "1"]) == (1 if require else 0)
    out = capsys.readouterr().out
    assert "rest            skipped: x is gone" in out
    assert f"0 ok, 1 skipped, {1 if require else 0} failed" in out
    assert not runner.Result("t", returncode=0, skipped="x is gone").ok


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "rest", "--seconds", "1", "--", "-seed=7", "-runs=3"],
        ["run", "--seconds", "1", "rest", "--", "-seed=7", "-runs=3"],
    ],
)
def test_libfuzzer_flags_follow_two_dashes_wherever_the_target_is(
    argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []

    def run(
        name: str, seconds: int, workdir: Path, flags: list[str], verbose: bool
    ) -> runner.Result:
        seen.append(flags)
        return runner.Result(name, returncode=0)

    monkeypatch.setattr(runner, "run", run)
    assert fuzz_cli.main(argv) == 0
    assert seen == [["-seed=7", "-runs=3"]]


def test_dictionary_tokens_are_escaped(tmp_path: Path) -> None:
    target = TARGETS["rest"]
    path = tmp_path / "tokens.dict"
    runner.write_dictionary(target, path)
    lines = path.read_text().splitlines()
    assert len(lines) == len(target.dictionary)
    assert '"\\x22inputs\\x22"' in lines
    assert '"\\x22\\x5cud800\\x22"' in lines


def test_the_memory_cap_refuses_one_allocation_past_it() -> None:
    """What makes "no allocation past the bound" a finding: after the cap, one allocation of
    more than the target's memory_mb fails (MemoryError) instead of succeeding lazily."""
    code = (
        "import numpy as np\n"
        "from fuzz.worker import cap_memory\n"
        "cap_memory(256)\n"
        "small = np.ones(64 * 2**20, np.uint8)\n"
        "try:\n"
        "    np.ones(512 * 2**20, np.uint8)\n"
        "except MemoryError:\n"
        "    print('refused')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=runner.ROOT, capture_output=True, text=True, check=True
    )
    assert "capped at" in done.stdout
    assert done.stdout.rstrip().endswith("refused"), done.stdout + done.stderr
