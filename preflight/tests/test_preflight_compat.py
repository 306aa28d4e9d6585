"""The pure core: driver versions, the CUDA table, every verdict with the message a user sees."""

from __future__ import annotations

import pytest

from inferline_preflight.compat import (
    FORWARD,
    NATIVE,
    Driver,
    DriverVersion,
    Missing,
    MissingKind,
    Options,
    Outcome,
    Requirement,
    check,
    describe_gpus,
    is_datacenter,
)

CUDA_12_6 = Requirement.for_cuda("12.6")
DEFAULT = Options()
REQUIRE_GPU = Options(require_gpu=True)

UPGRADE = (
    "Upgrade the node's NVIDIA driver (with the GPU Operator: its driver version), or schedule "
    "the pod on nodes that have a newer one"
)
CHECK_ACCESS = (
    "Check that the pod runs on a GPU node (kubectl get nodes -L nvidia.com/gpu.present), that "
    "this container asks for a GPU (resources.limits nvidia.com/gpu, or runtimeClassName: "
    "nvidia), and that the node has the NVIDIA driver and container toolkit (the GPU Operator "
    "installs both)."
)
NEEDS = (
    "driver 560.28.03 or later, or on a data-center GPU one of the forward-compatible branches "
    "R470 >= 470.57, R525 >= 525.85, R535 >= 535.86 or R545 >= 545.23"
)
MINOR_MODE = (
    "It runs in CUDA minor version compatibility mode (CUDA 12 on 525.60.13 or later, without "
    "the newest CUDA features), which NVIDIA does not support for this image."
)
CRASH = (
    'started anyway, the container would fail with "CUDA driver version is insufficient for '
    'CUDA runtime version".'
)


def verdict(
    version: str, gpus: tuple[str, ...], options: Options = DEFAULT, cuda: str | None = None
) -> tuple[bool, Outcome, str]:
    v = check(Driver(version, cuda, gpus), CUDA_12_6, options)
    return v.ok, v.outcome, v.message


# --- driver versions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("560.35.03", (560, 35, 3)),
        ("535.161.08", (535, 161, 8)),
        (" 470.57.02\n", (470, 57, 2)),
        ("470.57", (470, 57, 0)),
        ("560", (560, 0, 0)),
    ],
)
def test_driver_versions_parse(text: str, key: tuple[int, int, int]) -> None:
    version = DriverVersion.parse(text)
    assert version.key == key
    assert str(version) == text.strip()  # printed as NVML wrote it: 535.86.09, not 535.86.9
    assert version.branch == key[0]


@pytest.mark.parametrize("text", ["", "N/A", "560.35.03-beta", "v560", "560..1", "1.2.3.4.5"])
def test_driver_versions_reject_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="not an NVIDIA driver version"):
        DriverVersion.parse(text)


def test_driver_versions_order_numerically() -> None:
    ordered = ["470.57", "470.57.02", "470.182.03", "535.86.10", "535.104.05", "560.28.03"]
    versions = [DriverVersion.parse(t) for t in reversed(ordered)]
    assert [str(v) for v in sorted(versions)] == ordered
    assert DriverVersion.parse("535.86") == DriverVersion.parse("535.86.0")


# --- the table -----------------------------------------------------------------------------------


def test_cuda_12_6_row_is_triton_24_10s() -> None:
    """Release notes of Triton 24.10 and the CUDA 12.6 toolkit (sources in compat.py)."""
    assert str(CUDA_12_6.native) == "560.28.03"
    assert [str(m) for m in CUDA_12_6.forward] == ["470.57", "525.85", "535.86", "545.23"]
    assert str(CUDA_12_6.minor_floor) == "525.60.13"
    assert Requirement.for_cuda("12.6.2") == CUDA_12_6  # the update release reads as its minor


def test_table_is_consistent() -> None:
    assert list(NATIVE) == sorted(NATIVE, key=lambda v: tuple(map(int, v.split("."))))
    assert sorted(NATIVE.values()) == list(NATIVE.values())  # newer CUDA, newer driver
    for cuda, branches in FORWARD.items():
        assert all(m < NATIVE[cuda] for m in branches), cuda
        assert len({m.branch for m in branches}) == len(branches), cuda
    # Without forward-compatible branches on record, a row offers only native and minor.
    assert Requirement.for_cuda("12.0").forward == ()
    assert Requirement.for_cuda("12.0").native == Requirement.for_cuda("12.0").minor_floor


@pytest.mark.parametrize("cuda", ["12.9", "11.8", "13.0", "twelve", "12", ""])
def test_unknown_cuda_versions_name_the_table(cuda: str) -> None:
    with pytest.raises(ValueError) as raised:
        Requirement.for_cuda(cuda)
    assert str(raised.value) == (
        f"CUDA {cuda!r} is not in the preflight's table (known: 12.0, 12.1, 12.2, 12.3, 12.4, "
        "12.5, 12.6); add its row to inferline_preflight/compat.py with its source"
    )


@pytest.mark.parametrize(
    "name",
    [
        "Tesla T4",
        "Tesla V100-SXM2-16GB",
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA A10G",
        "NVIDIA A2",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H200",
        "NVIDIA GH200 480GB",
        "NVIDIA L4",
        "NVIDIA L40S",
        "NVIDIA B200",
    ],
)
def test_data_center_gpus_by_name(name: str) -> None:
    assert is_datacenter(name)


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GeForce RTX 4090",
        "NVIDIA GeForce GTX 1080 Ti",
        "NVIDIA RTX A6000",
        "Quadro RTX 8000",
        "NVIDIA T1000",
        "NVIDIA TITAN RTX",
        "GPU 0 (name unreadable: GPU is lost)",
    ],
)
def test_other_gpus_by_name(name: str) -> None:
    assert not is_datacenter(name)


def test_gpus_are_described_with_counts() -> None:
    assert describe_gpus([]) == "no GPU visible"
    assert describe_gpus(["NVIDIA L4"]) == "1 GPU (NVIDIA L4)"
    assert describe_gpus(["NVIDIA H100 80GB HBM3"] * 8) == "8 GPUs (8x NVIDIA H100 80GB HBM3)"
    assert (
        describe_gpus(["NVIDIA L4", "Tesla T4", "NVIDIA L4"]) == "3 GPUs (2x NVIDIA L4, Tesla T4)"
    )


# --- the verdicts, each with its message ---------------------------------------------------------


def test_a_good_driver_passes_in_one_line() -> None:
    assert verdict("560.35.03", ("NVIDIA L4",), cuda="12.6") == (
        True,
        Outcome.NATIVE,
        "preflight ok: NVIDIA driver 560.35.03 (CUDA 12.6) on 1 GPU (NVIDIA L4) runs this "
        "image's CUDA 12.6, which needs driver 560.28.03 or later",
    )
    # Newer branches, and the first driver of the branch, pass too, on any GPU.
    for version in ("560.28.03", "565.57.01", "570.86.15", "580.65.06"):
        assert verdict(version, ("NVIDIA GeForce RTX 4090",))[:2] == (True, Outcome.NATIVE)


@pytest.mark.parametrize(
    ("version", "branch"),
    [("470.57.02", "R470 >= 470.57"), ("470.256.02", "R470 >= 470.57"),
     ("525.85.12", "R525 >= 525.85"), ("525.147.05", "R525 >= 525.85"),
     ("535.86.10", "R535 >= 535.86"), ("535.230.02", "R535 >= 535.86"),
     ("545.23.08", "R545 >= 545.23"), ("545.29.06", "R545 >= 545.23")],
)  # fmt: skip
def test_forward_compatible_data_center_branches_pass_and_say_so(version: str, branch: str) -> None:
    assert verdict(version, ("NVIDIA A100-SXM4-80GB",) * 8) == (
        True,
        Outcome.FORWARD,
        f"preflight ok: NVIDIA driver {version} on 8 GPUs (8x NVIDIA A100-SXM4-80GB) runs this "
        f"image's CUDA 12.6 through CUDA forward compatibility (a data-center GPU, {branch}); "
        "natively CUDA 12.6 needs driver 560.28.03 or later",
    )


def test_a_too_old_driver_fails_naming_driver_cuda_and_minimum() -> None:
    assert verdict("515.65.01", ("Tesla T4",), cuda="11.7") == (
        False,
        Outcome.TOO_OLD,
        "preflight FAILED: NVIDIA driver 515.65.01 (CUDA 11.7) on 1 GPU (Tesla T4) is too old for "
        f"this image's CUDA 12.6, which needs {NEEDS}. {UPGRADE}; {CRASH}",
    )


def test_a_forward_compatible_branch_below_its_minimum_fails() -> None:
    assert verdict("470.42.01", ("Tesla T4",)) == (
        False,
        Outcome.TOO_OLD,
        "preflight FAILED: NVIDIA driver 470.42.01 on 1 GPU (Tesla T4) is too old for this "
        f"image's CUDA 12.6, which needs {NEEDS}; R470 is forward-compatible from 470.57 on, not "
        f"470.42.01. {UPGRADE}; {CRASH}",
    )


def test_a_forward_compatible_branch_on_a_consumer_gpu_fails() -> None:
    assert verdict("470.82.01", ("NVIDIA GeForce RTX 3090",), cuda="11.4") == (
        False,
        Outcome.TOO_OLD,
        "preflight FAILED: NVIDIA driver 470.82.01 (CUDA 11.4) on 1 GPU (NVIDIA GeForce RTX 3090) "
        f"is too old for this image's CUDA 12.6, which needs {NEEDS}; R470 is forward-compatible "
        "on data-center GPUs only, and NVIDIA GeForce RTX 3090 is not one (--datacenter yes / "
        f"INFERLINE_PREFLIGHT_DATACENTER=yes overrides the name check). {UPGRADE}; {CRASH}",
    )


def test_the_data_center_decision_can_be_overridden() -> None:
    unknown_name = ("NVIDIA RTX PRO 6000 Blackwell Server Edition",)
    assert verdict("535.216.01", unknown_name)[1] == Outcome.MINOR
    assert verdict("535.216.01", unknown_name, Options(datacenter=True))[:2] == (
        True,
        Outcome.FORWARD,
    )
    ok, outcome, message = verdict("470.82.01", ("Tesla T4",), Options(datacenter=False))
    assert (ok, outcome) == (False, Outcome.TOO_OLD)
    assert "; forward compatibility needs a data-center GPU, and --datacenter no is set." in message
    # Mixed GPUs: forward compatibility only when every one of them can use it.
    assert verdict("535.216.01", ("NVIDIA L4", "NVIDIA GeForce RTX 4090"))[1] == Outcome.MINOR


def test_minor_version_compatibility_passes_with_a_warning() -> None:
    assert verdict("550.127.05", ("NVIDIA L4",), cuda="12.4") == (
        True,
        Outcome.MINOR,
        "preflight ok, with a warning: NVIDIA driver 550.127.05 (CUDA 12.4) on 1 GPU (NVIDIA L4) "
        f"is older than this image's CUDA 12.6 needs: {NEEDS}. {MINOR_MODE} {UPGRADE} (--strict / "
        "INFERLINE_PREFLIGHT_STRICT=true makes this an error).",
    )


def test_minor_version_compatibility_fails_when_strict() -> None:
    assert verdict("550.127.05", ("NVIDIA L4",), Options(strict=True), cuda="12.4") == (
        False,
        Outcome.MINOR,
        "preflight FAILED: NVIDIA driver 550.127.05 (CUDA 12.4) on 1 GPU (NVIDIA L4) is older "
        f"than this image's CUDA 12.6 needs: {NEEDS}. {MINOR_MODE} {UPGRADE} (--strict is set; "
        "without it this is a warning).",
    )


def test_minor_version_compatibility_says_why_a_branch_does_not_forward() -> None:
    ok, outcome, message = verdict("535.183.01", ("NVIDIA GeForce RTX 4090",))
    assert (ok, outcome) == (True, Outcome.MINOR)
    assert (
        f"needs: {NEEDS}; R535 is forward-compatible on data-center GPUs only, and NVIDIA GeForce "
        "RTX 4090 is not one (--datacenter yes / INFERLINE_PREFLIGHT_DATACENTER=yes overrides the "
        f"name check). {MINOR_MODE}"
    ) in message
    # The floor of CUDA 12's minor version compatibility, and just under it.
    assert verdict("525.60.13", ("NVIDIA GeForce RTX 4090",))[1] == Outcome.MINOR
    assert verdict("520.61.05", ("NVIDIA GeForce RTX 4090",))[1] == Outcome.TOO_OLD


def test_no_driver_fails_when_a_gpu_is_required() -> None:
    missing = Missing(MissingKind.LIBRARY, "libnvidia-ml.so.1 not found")
    result = check(missing, CUDA_12_6, REQUIRE_GPU)
    assert (result.ok, result.outcome, result.message) == (
        False,
        Outcome.NO_DRIVER,
        "preflight FAILED: no NVIDIA driver is visible in this container (libnvidia-ml.so.1 not "
        f"found), so this image's CUDA 12.6 cannot run here. {CHECK_ACCESS}",
    )


def test_no_driver_is_a_skip_otherwise() -> None:
    missing = Missing(MissingKind.LIBRARY, "libnvidia-ml.so.1 not found")
    result = check(missing, CUDA_12_6, DEFAULT)
    assert (result.ok, result.outcome, result.message) == (
        True,
        Outcome.NO_DRIVER,
        "preflight ok: no NVIDIA driver is visible in this container (libnvidia-ml.so.1 not "
        "found), so there is nothing to check (--require-gpu / "
        "INFERLINE_PREFLIGHT_REQUIRE_GPU=true makes this an error)",
    )


def test_a_driver_not_loaded_on_the_node_says_to_check_the_node() -> None:
    missing = Missing(MissingKind.DRIVER, "NVML: Driver Not Loaded")
    result = check(missing, CUDA_12_6, REQUIRE_GPU)
    assert result.message == (
        "preflight FAILED: the NVIDIA driver's library is in this container but the node's kernel "
        "driver is not loaded (NVML: Driver Not Loaded), so this image's CUDA 12.6 cannot run "
        "here. Check the node: nvidia-smi on the host, or the logs of the GPU Operator's driver "
        "pod on it."
    )


def test_other_nvml_failures_and_a_broken_image() -> None:
    error = check(
        Missing(MissingKind.ERROR, "NVML: Insufficient Permissions"), CUDA_12_6, REQUIRE_GPU
    )
    assert error.message == (
        "preflight FAILED: NVML could not read the NVIDIA driver (NVML: Insufficient "
        f"Permissions), so this image's CUDA 12.6 cannot run here. {CHECK_ACCESS}"
    )
    module = check(Missing(MissingKind.MODULE, "import pynvml: no module"), CUDA_12_6, DEFAULT)
    assert not module.ok  # even without --require-gpu: the image itself is broken
    assert module.message == (
        "preflight FAILED: this image cannot load NVML's Python bindings (import pynvml: no "
        "module), so this image's CUDA 12.6 cannot run here. Rebuild the image: make images "
        "IMAGES=preflight."
    )


def test_a_driver_without_a_visible_gpu() -> None:
    assert verdict("560.35.03", (), REQUIRE_GPU) == (
        False,
        Outcome.NO_GPU,
        "preflight FAILED: NVIDIA driver 560.35.03 is visible in this container but no GPU is, so "
        f"this image's CUDA 12.6 has nothing to run on. {CHECK_ACCESS} NVIDIA_VISIBLE_DEVICES=none "
        "or void also hides them.",
    )
    assert verdict("560.35.03", ()) == (
        True,
        Outcome.NATIVE,
        "preflight ok: NVIDIA driver 560.35.03, with no GPU visible, runs this image's CUDA 12.6, "
        "which needs driver 560.28.03 or later",
    )
    # Without a GPU to call data-center, a forward-compatible branch cannot count.
    ok, outcome, message = verdict("535.216.01", ())
    assert (ok, outcome) == (True, Outcome.MINOR)
    assert "; forward compatibility needs a data-center GPU, and none is visible." in message


def test_an_unreadable_driver_version_fails() -> None:
    assert verdict("N/A", ("NVIDIA L4",)) == (
        False,
        Outcome.BAD_VERSION,
        "preflight FAILED: NVML reported the driver version 'N/A', which the preflight cannot "
        "read, so it cannot tell whether it runs this image's CUDA 12.6. CUDA 12.6 needs driver "
        "560.28.03 or later.",
    )


def test_another_cuda_version_uses_its_row() -> None:
    """E.g. the preprocess GPU image's DALI wheels (CUDA 12, minor version compatibility)."""
    cuda_12_0 = Requirement.for_cuda("12.0")
    result = check(Driver("525.60.13", "12.0", ("NVIDIA GeForce RTX 4090",)), cuda_12_0, DEFAULT)
    assert (result.ok, result.outcome) == (True, Outcome.NATIVE)
    old = check(Driver("470.82.01", "11.4", ("Tesla T4",)), cuda_12_0, DEFAULT)
    assert (old.ok, old.outcome) == (False, Outcome.TOO_OLD)
    assert "which needs driver 525.60.13 or later. Upgrade" in old.message  # no branches listed
