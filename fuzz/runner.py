"""Runs a target's worker under libFuzzer's bounds and reads its figures.

Per target, under the work folder (``build/fuzz`` by default):

- ``corpus/``: what the fuzzer found interesting; kept between runs, so each run starts where
  the last one stopped (libFuzzer writes new inputs only here);
- ``seeds/``: the target's real inputs, written afresh on every run;
- ``findings/``: the input of each crash, hang (``timeout-``) or memory overrun (``oom-``);
- ``fuzz.log``: the worker's output.

The committed regressions (``fuzz/regressions/<target>/``) are read as corpus too.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fuzz.targets import TARGETS, Target
from inferline_testing.tools import REQUIRE_ENV, required

ROOT = Path(__file__).resolve().parent.parent
REGRESSIONS = Path(__file__).resolve().parent / "regressions"
WORKDIR = ROOT / "build" / "fuzz"
FINDING_PREFIXES = ("crash-", "timeout-", "oom-", "leak-")
# One thread each for OpenBLAS and OpenMP, and two malloc arenas, whatever the machine: the
# worker's address space (capped) and speed do not grow with the core count, and the fuzzer
# shares the machine.
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}
# Past the fuzzing time: the worker's start (imports, DALI pipelines) and its first pass over
# the corpus. A worker still running after that is stuck where libFuzzer's own limits cannot
# see it, and is a finding too.
GRACE_S = 180


@dataclass
class Result:
    target: str
    seconds: float = 0.0  # wall time of the worker, start-up included
    executions: int | None = None
    exec_per_s: int | None = None
    coverage: int | None = None  # libFuzzer "cov": instrumented edges reached
    features: int | None = None  # libFuzzer "ft": edges and their hit counts
    corpus: int | None = None  # inputs in the corpus at the end
    new_units: int | None = None
    peak_rss_mb: int | None = None
    slowest_s: int | None = None
    returncode: int | None = None
    findings: list[Path] = field(default_factory=list)
    skipped: str = ""
    log: Path | None = None
    problem: str = ""  # what went wrong outside libFuzzer's own reports

    @property
    def ok(self) -> bool:
        """It ran and found nothing (a skipped target is not ok: it proved nothing)."""
        return not self.skipped and (
            self.returncode == 0 and not self.findings and not self.problem
        )

    @property
    def failed(self) -> bool:
        """A finding, a failed run, or a skip where tools are required (CI)."""
        return not self.ok and (not self.skipped or required())

    def summary(self) -> str:
        if self.skipped:
            fails = f" ({REQUIRE_ENV}=1: a failure)" if required() else ""
            return f"{self.target:<15} skipped: {self.skipped}{fails}"

        def number(value: int | None) -> str:
            return "?" if value is None else f"{value:,}"

        verdict = "ok" if self.ok else "FOUND " + ", ".join(p.name for p in self.findings)
        if self.problem:
            verdict = f"FAILED: {self.problem}"
        elif not self.ok and not self.findings:
            verdict = f"FAILED: worker exited {self.returncode}"
        return (
            f"{self.target:<15} {self.seconds:5.0f} s  {number(self.executions):>10} runs  "
            f"{number(self.exec_per_s):>6} exec/s  cov {number(self.coverage):>6}  "
            f"ft {number(self.features):>7}  corpus {number(self.corpus):>6}  "
            f"new {number(self.new_units):>5}  peak RSS {number(self.peak_rss_mb)} MB  "
            f"slowest input {number(self.slowest_s)} s  {verdict}"
        )


def tally(results: Sequence[Result]) -> str:
    """``3 ok, 1 skipped, 0 failed``: a skipped target is never counted as passed."""
    skipped = sum(bool(r.skipped) for r in results)
    failed = sum(r.failed for r in results)
    ok = sum(r.ok for r in results)
    fails = f" (skips fail: {REQUIRE_ENV}=1)" if skipped and required() else ""
    return f"{ok} ok, {skipped} skipped, {failed} failed{fails}"


def folders(target: Target, workdir: Path) -> dict[str, Path]:
    base = workdir / target.name
    return {name: base / name for name in ("corpus", "seeds", "findings")}


def write_seeds(target: Target, folder: Path) -> int:
    """The target's real inputs into ``folder`` (emptied first); how many."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    seeds = importlib.import_module(target.module).seeds()
    for name, data in seeds.items():
        (folder / name).write_bytes(data)
    return len(seeds)


def write_dictionary(target: Target, path: Path) -> None:
    """The target's tokens in libFuzzer's dictionary format (one quoted, escaped token a line)."""
    lines = []
    for token in target.dictionary:
        escaped = "".join(
            chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\x{b:02x}" for b in token
        )
        lines.append(f'"{escaped}"')
    path.write_text("\n".join(lines) + "\n")


def limits(target: Target) -> list[str]:
    """libFuzzer's per-input bounds for ``target``."""
    return [
        f"-timeout={target.timeout_s}",
        f"-rss_limit_mb={target.rss_limit_mb}",
        f"-max_len={target.max_len}",
    ]


def worker(target: Target, args: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "fuzz.worker", target.name, *limits(target), *args]


def environment(target: Target) -> dict[str, str]:
    env = {**os.environ, **WORKER_ENV, **dict(target.env)}
    # The worker imports ``fuzz`` from this checkout, wherever it is started from.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def run(
    name: str,
    seconds: int,
    workdir: Path = WORKDIR,
    extra: Sequence[str] = (),
    echo: bool = False,
) -> Result:
    """Fuzz target ``name`` for ``seconds``; its figures and findings."""
    target = TARGETS[name]
    result = Result(name)
    if reason := target.unavailable():
        result.skipped = reason
        return result
    paths = folders(target, workdir)
    for path in paths.values():
        path.mkdir(parents=True, exist_ok=True)
    write_seeds(target, paths["seeds"])
    before = set(paths["findings"].iterdir())
    args = [
        f"-max_total_time={seconds}",
        "-print_final_stats=1",
        f"-artifact_prefix={paths['findings']}{os.sep}",
        *extra,
    ]
    if target.dictionary:
        dictionary = workdir / name / "tokens.dict"
        write_dictionary(target, dictionary)
        args.append(f"-dict={dictionary}")
    corpora = [paths["corpus"], paths["seeds"]]
    if (REGRESSIONS / name).is_dir():
        corpora.append(REGRESSIONS / name)
    result.log = workdir / name / "fuzz.log"
    command = worker(target, [*args, *map(str, corpora)])
    start = time.monotonic()
    with open(result.log, "w") as log:
        log.write(" ".join(command) + "\n")
        log.flush()
        process = subprocess.Popen(command, **worker_io(target))
        assert process.stdout is not None
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            process.kill()

        watchdog = threading.Timer(seconds + GRACE_S, kill)
        watchdog.start()
        try:
            for line in process.stdout:
                log.write(line)
                if echo:
                    print(line, end="", flush=True)
        finally:
            watchdog.cancel()
        if killed.is_set():
            result.problem = f"killed, still running {seconds + GRACE_S} s after it started"
        result.returncode = process.wait()
    result.seconds = time.monotonic() - start
    read_figures(result.log.read_text(errors="replace"), result)
    result.findings = sorted(
        path
        for path in set(paths["findings"].iterdir()) - before
        if path.name.startswith(FINDING_PREFIXES)
    )
    return result


_STATUS = re.compile(
    r"^#(\d+)\s+(?:DONE|pulse|NEW|REDUCE|INITED|RELOAD)\s+cov: (\d+) ft: (\d+) corp: (\d+)/",
    re.MULTILINE,
)
_STATS = re.compile(r"^stat::(\w+):\s+(\d+)", re.MULTILINE)


def read_figures(output: str, result: Result) -> None:
    """libFuzzer's status lines and final statistics into ``result``."""
    statuses = _STATUS.findall(output)
    if statuses:
        executions, coverage, features, corpus = map(int, statuses[-1])
        result.executions, result.coverage = executions, coverage
        result.features, result.corpus = features, corpus
    stats = {name: int(value) for name, value in _STATS.findall(output)}
    result.executions = stats.get("number_of_executed_units", result.executions)
    result.exec_per_s = stats.get("average_exec_per_sec")
    result.new_units = stats.get("new_units_added")
    result.peak_rss_mb = stats.get("peak_rss_mb")
    result.slowest_s = stats.get("slowest_unit_time_sec")


def worker_io(target: Target) -> dict[str, Any]:
    """How a worker process runs: from the repository, with the target's environment, its
    output (stdout and stderr together) read as text."""
    return {
        "cwd": ROOT,
        "env": environment(target),
        "stdout": subprocess.PIPE,
        "stderr": subprocess.STDOUT,
        "text": True,
        "errors": "replace",
    }


def reproduce(name: str, files: Sequence[Path]) -> subprocess.CompletedProcess[str]:
    """Run target ``name`` once on each of ``files``, under the same per-input bounds."""
    target = TARGETS[name]
    return subprocess.run(worker(target, [str(f) for f in files]), **worker_io(target), check=False)
