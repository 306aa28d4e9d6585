"""`make bench-gpu` on a machine without a GPU: it refuses by name (exit 2), or with
``--skip-if-no-gpu`` (CI) says SKIPPED and exits 0 without writing a result; and its arithmetic.

The command runs as a user runs it (a process of its own). On a machine where DALI sees a GPU
those tests skip: there it would run the whole 8-minute benchmark.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from bench.gpu.machine import no_gpu_reason
from bench.gpu.params import PARTS, _parts
from bench.gpu.pipeline import cores_per_gpu
from bench.pipeline.measure import CLIENT

ROOT = Path(__file__).resolve().parents[2]
NO_GPU = "no CUDA GPU visible to DALI"

without_gpu = pytest.mark.skipif(
    no_gpu_reason() is None, reason="DALI sees a GPU here: the benchmark would run for real"
)


def bench_gpu(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench.gpu", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@without_gpu
def test_skip_if_no_gpu_says_skipped_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    done = bench_gpu("--skip-if-no-gpu", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"SKIPPED: {NO_GPU} (")
    assert not out.exists()  # a skip leaves an earlier GPU machine's result alone


@without_gpu
def test_without_a_gpu_it_exits_2_saying_why_on_stderr(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    done = bench_gpu("--out", str(out))
    assert done.returncode == 2
    assert NO_GPU in done.stderr
    assert "--skip-if-no-gpu" in done.stderr
    assert "SKIPPED" not in done.stdout
    assert not out.exists()


def test_parts_are_a_comma_separated_choice_in_a_fixed_order() -> None:
    assert _parts("pipeline,decode") == ("decode", "pipeline")
    assert _parts("model") == ("model",)
    assert _parts(",".join(PARTS)) == PARTS
    for bad in ("", "decode,gpu", ","):
        with pytest.raises(argparse.ArgumentTypeError):
            _parts(bad)


def test_cores_per_gpu_is_cpu_ms_per_image_times_the_gpus_images_per_s() -> None:
    scenarios = {
        "1": {"total_cpu_ms_per_image": 3.0, "cpu_ms_per_image": {CLIENT: 0.5, "triton": 1.0}},
        "8": {"total_cpu_ms_per_image": 1.2, "cpu_ms_per_image": {CLIENT: 0.2, "triton": 0.4}},
    }
    # 2.5 ms of server CPU per image at 4,000 images/s: 10 s of CPU per second, 10 cores.
    assert cores_per_gpu(scenarios, 4000.0) == {
        "cores_per_gpu": {"1": 10.0, "8": 4.0},
        "cores_per_gpu_including_client": {"1": 12.0, "8": 4.8},
    }
    unknown = cores_per_gpu(scenarios, None)
    assert unknown["cores_per_gpu"] is None and "--parts model" in unknown["cores_per_gpu_note"]
