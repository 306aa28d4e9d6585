"""``python -m inferline_preflight``: flags, variables, exit status, output, termination log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inferline_preflight.__main__ import main
from inferline_preflight.compat import Missing, MissingKind

from .conftest import LIBRARY_NOT_FOUND, FakeNvml, FakeNvmlError

NO_LIBRARY = FakeNvmlError(LIBRARY_NOT_FOUND)


def run(
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    fake: FakeNvml,
    environ: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    code = main([*argv, "--termination-log", ""], environ or {}, fake)
    out, err = capsys.readouterr()
    return code, out, err


def test_a_good_driver_exits_0_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, ["--require-gpu"], FakeNvml())
    assert (code, err) == (0, "")
    assert out == (
        "preflight ok: NVIDIA driver 560.35.03 (CUDA 12.6) on 1 GPU (NVIDIA L4) runs this image's "
        "CUDA 12.6, which needs driver 560.28.03 or later\n"
    )


def test_a_too_old_driver_exits_1_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, [], FakeNvml(driver="470.82.01", gpus=["NVIDIA GeForce GTX 1080"]))
    assert (code, out) == (1, "")
    assert err.startswith(
        "preflight FAILED: NVIDIA driver 470.82.01 (CUDA 12.6) on 1 GPU (NVIDIA GeForce GTX 1080) "
        "is too old for this image's CUDA 12.6, which needs driver 560.28.03 or later"
    )
    assert err.count("\n") == 1


def test_no_driver_skips_unless_required(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, [], FakeNvml(init_error=NO_LIBRARY))[0] == 0
    code, _, err = run(capsys, ["--require-gpu"], FakeNvml(init_error=NO_LIBRARY))
    assert code == 1
    assert "no NVIDIA driver is visible in this container (libnvidia-ml.so.1 not found)" in err


def test_variables_configure_it_and_flags_win(capsys: pytest.CaptureFixture[str]) -> None:
    l4_550 = FakeNvml(driver="550.127.05", cuda=12040)
    assert run(capsys, [], l4_550)[0] == 0  # minor version compatibility: a warning
    strict = {"INFERLINE_PREFLIGHT_STRICT": "true"}
    assert run(capsys, [], l4_550, strict)[0] == 1
    assert run(capsys, ["--no-strict"], l4_550, strict)[0] == 0
    required = {"INFERLINE_PREFLIGHT_REQUIRE_GPU": "1"}
    assert run(capsys, [], FakeNvml(init_error=NO_LIBRARY), required)[0] == 1
    # The image's CUDA version picks the row: 550 runs a CUDA 12.4 image natively.
    assert (
        "runs this image's CUDA 12.4"
        in run(capsys, [], l4_550, {"INFERLINE_PREFLIGHT_CUDA": "12.4"})[1]
    )
    assert "runs this image's CUDA 12.4" in run(capsys, ["--cuda", "12.4"], l4_550)[1]
    # A GPU whose name the preflight does not know, declared a data-center GPU.
    rtx_pro = FakeNvml(driver="535.216.01", gpus=["NVIDIA RTX PRO 6000 Blackwell Server Edition"])
    _, out, _ = run(capsys, [], rtx_pro, {"INFERLINE_PREFLIGHT_DATACENTER": "yes"})
    assert "through CUDA forward compatibility" in out


@pytest.mark.parametrize(
    ("argv", "environ", "message"),
    [
        (
            [],
            {"INFERLINE_PREFLIGHT_STRICT": "maybe"},
            "preflight: INFERLINE_PREFLIGHT_STRICT='maybe': expected true or false\n",
        ),
        (
            [],
            {"INFERLINE_PREFLIGHT_DATACENTER": "sometimes"},
            "preflight: INFERLINE_PREFLIGHT_DATACENTER='sometimes': expected auto, yes or no\n",
        ),
        (
            ["--cuda", "12.9"],
            {},
            "preflight: --cuda / INFERLINE_PREFLIGHT_CUDA: CUDA '12.9' is not in the preflight's "
            "table (known: 12.0, 12.1, 12.2, 12.3, 12.4, 12.5, 12.6); add its row to "
            "inferline_preflight/compat.py with its source\n",
        ),
    ],
)
def test_bad_configuration_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], argv: list[str], environ: dict[str, str], message: str
) -> None:
    code, out, err = run(capsys, argv, FakeNvml(), environ)
    assert (code, out, err) == (2, "", message)


def test_the_message_goes_to_the_termination_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "termination-log"
    log.touch()  # the kubelet creates it
    fake = FakeNvml(driver="470.82.01", gpus=["NVIDIA GeForce GTX 1080"])
    assert main(["--termination-log", str(log)], {}, fake) == 1
    _, err = capsys.readouterr()
    assert log.read_text(encoding="utf-8") == err
    # Outside Kubernetes there is no such file, and none is created.
    absent = tmp_path / "absent"
    environ = {"INFERLINE_PREFLIGHT_TERMINATION_LOG": str(absent)}
    assert main([], environ, FakeNvml()) == 0
    assert not absent.exists()


def test_the_module_runs_with_the_real_nvml() -> None:
    """The image's entrypoint on this machine (no GPU in CI): a skip, or with --require-gpu, the
    message naming what to check; on a GPU machine, the real driver's verdict."""
    argv = [sys.executable, "-m", "inferline_preflight", "--termination-log", ""]
    plain = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert plain.stdout.startswith("preflight ok") or plain.stderr.startswith("preflight FAILED")
    required = subprocess.run(
        [*argv, "--require-gpu"], capture_output=True, text=True, timeout=60, check=False
    )
    if "no NVIDIA driver is visible" in plain.stdout:
        assert plain.returncode == 0
        assert required.returncode == 1
        assert "(libnvidia-ml.so.1 not found)" in required.stderr
        assert "nvidia.com/gpu" in required.stderr


def test_help_lists_every_flag() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "inferline_preflight", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for flag in ("--cuda", "--require-gpu", "--strict", "--datacenter", "--termination-log"):
        assert flag in result.stdout


def test_an_image_without_nvml_bindings_always_fails(capsys: pytest.CaptureFixture[str]) -> None:
    broken = Missing(MissingKind.MODULE, "import pynvml: No module named 'pynvml'")
    assert main(["--termination-log", ""], {}, broken) == 1
    assert capsys.readouterr().err == (
        "preflight FAILED: this image cannot load NVML's Python bindings (import pynvml: No module "
        "named 'pynvml'), so this image's CUDA 12.6 cannot run here. Rebuild the image: make "
        "images IMAGES=preflight.\n"
    )
