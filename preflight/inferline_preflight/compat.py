"""Whether a node's NVIDIA driver runs an image built with a given CUDA version: the pure core.

No NVML and no I/O here: :func:`check` takes what the reader found (:class:`Driver` or
:class:`Missing`) and the image's :class:`Requirement` and returns a :class:`Verdict`, the exit
status and the one message a user sees. Four outcomes for a driver:

- **native**: the driver is at least the one the image's CUDA toolkit ships with;
- **forward compatibility**: on a data-center GPU, a driver of one of the branches NVIDIA lists
  for the image (at or above that branch's minimum) runs it through the CUDA compatibility
  package the NGC images carry (Triton's included);
- **minor version compatibility**: a driver of the same CUDA major release, but older: CUDA
  runs, without the newest features (PTX JIT of newer code, ...), and NVIDIA does not list it for
  the image. Accepted with a warning (the NGC images start in this mode too), an error with
  ``strict``;
- **too old**: anything else; the container would crash with "CUDA driver version is
  insufficient for CUDA runtime version", so the preflight fails first and says what to fix.

Sources for the table (docs.nvidia.com):

- Triton Inference Server release notes, release 24.10 (the image ``tritonserver:24.10-py3``,
  Triton 2.51), "Driver Requirements": based on CUDA 12.6.2, "requires NVIDIA Driver release 560
  or later. However, if you are running on a data center GPU (for example, T4 or any other data
  center GPU), you can use NVIDIA driver release 470.57 (or later R470), 525.85 (or later R525),
  535.86 (or later R535), or 545.23 (or later R545)." (The branch list was checked against the
  notes of releases 24.03 and 24.04, which say the same with "545 or later".)
  deeplearning/triton-inference-server/release-notes/rel-24-10.html
- CUDA Toolkit release notes, "CUDA Toolkit and Corresponding Driver Versions" (Linux x86_64):
  the driver each toolkit release ships with, the ``NATIVE`` column below (12.6 GA: 560.28.03,
  the first R560 driver, so "560 or later" above says the same). cuda/cuda-toolkit-release-notes
- CUDA Compatibility: "Minor Version Compatibility" (CUDA 12.x runs with a limited feature set
  on 525.60.13 or later, 11.x on 450.80.02 or later) and "Forward Compatibility" (data-center
  GPUs only, and select NGC-ready RTX SKUs and Jetson). deploy/cuda-compatibility

Another image's CUDA version is one more row: its toolkit driver and, where its release notes
list them, its forward-compatible branches.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections import Counter
from collections.abc import Iterable

_VERSION = re.compile(r"\d+(\.\d+){0,3}")


@dataclasses.dataclass(frozen=True, order=True)
class DriverVersion:
    """An NVIDIA driver version such as 560.35.03; ordered numerically, printed as given."""

    key: tuple[int, int, int]
    text: str = dataclasses.field(compare=False)

    @classmethod
    def parse(cls, text: str) -> DriverVersion:
        """``"535.161.08"`` → DriverVersion; ValueError for anything else."""
        stripped = text.strip()
        if not _VERSION.fullmatch(stripped):
            raise ValueError(f"not an NVIDIA driver version: {text!r}")
        parts = [int(p) for p in stripped.split(".")][:3]
        major, minor, patch = (*parts, 0, 0)[:3]
        return cls((major, minor, patch), stripped)

    @property
    def branch(self) -> int:
        """The driver branch: 535 for 535.161.08 (NVIDIA writes it R535)."""
        return self.key[0]

    def __str__(self) -> str:
        return self.text


def _v(text: str) -> DriverVersion:
    return DriverVersion.parse(text)


# The driver each CUDA toolkit release ships with (CUDA Toolkit release notes, GA releases).
NATIVE: dict[str, DriverVersion] = {
    "12.0": _v("525.60.13"),
    "12.1": _v("530.30.02"),
    "12.2": _v("535.54.03"),
    "12.3": _v("545.23.06"),
    "12.4": _v("550.54.14"),
    "12.5": _v("555.42.02"),
    "12.6": _v("560.28.03"),
}
# Forward-compatible branches on data-center GPUs, each at its minimum, where an image's release
# notes list them: Triton 24.10 (CUDA 12.6).
FORWARD: dict[str, tuple[DriverVersion, ...]] = {
    "12.6": (_v("470.57"), _v("525.85"), _v("535.86"), _v("545.23")),
}
# Minor version compatibility: the oldest driver of each CUDA major release (CUDA Compatibility).
MINOR_FLOOR: dict[int, DriverVersion] = {11: _v("450.80.02"), 12: _v("525.60.13")}

DEFAULT_CUDA = "12.6"

# NVML's device names of data-center GPUs: "Tesla T4", "Tesla V100-SXM2-16GB", "NVIDIA A100-SXM4-
# 80GB", "NVIDIA A10G", "NVIDIA H100 80GB HBM3", "NVIDIA GH200 480GB", "NVIDIA L4", "NVIDIA L40S",
# "NVIDIA B200". Not: "NVIDIA GeForce RTX 4090", "NVIDIA RTX A6000", "Quadro RTX 8000", "NVIDIA
# T1000" (workstation). A name this misses is overridden with --datacenter yes.
_DATACENTER_NAME = re.compile(r"(Tesla |NVIDIA (A|B|GB|GH|H|L)\d+)")

INSUFFICIENT = "CUDA driver version is insufficient for CUDA runtime version"


def is_datacenter(name: str) -> bool:
    """Whether NVML's device name is a data-center GPU's (forward compatibility needs one)."""
    return _DATACENTER_NAME.match(name.strip()) is not None


@dataclasses.dataclass(frozen=True)
class Requirement:
    """What an image's CUDA version needs of the driver."""

    cuda: str
    native: DriverVersion
    forward: tuple[DriverVersion, ...]
    minor_floor: DriverVersion | None

    @classmethod
    def for_cuda(cls, cuda: str) -> Requirement:
        """The row for ``"12.6"`` (``"12.6.2"`` reads as 12.6); ValueError for a version not in
        the table, naming those that are."""
        parts = cuda.strip().split(".")
        key = ".".join(parts[:2])
        if len(parts) < 2 or not all(p.isdigit() for p in parts) or key not in NATIVE:
            known = ", ".join(NATIVE)
            raise ValueError(
                f"CUDA {cuda!r} is not in the preflight's table (known: {known}); "
                "add its row to inferline_preflight/compat.py with its source"
            )
        return cls(key, NATIVE[key], FORWARD.get(key, ()), MINOR_FLOOR.get(int(parts[0])))

    def forward_branch(self, driver: DriverVersion) -> DriverVersion | None:
        """The minimum of ``driver``'s branch when that branch is forward-compatible."""
        return next((m for m in self.forward if m.branch == driver.branch), None)

    def describe_forward(self) -> str:
        """``R470 >= 470.57, R525 >= 525.85 or R535 >= 535.86`` (empty when there is none)."""
        each = [f"R{m.branch} >= {m}" for m in self.forward]
        return " or ".join([", ".join(each[:-1]), each[-1]] if len(each) > 1 else each)


@dataclasses.dataclass(frozen=True)
class Driver:
    """What NVML reported: the driver's version, the CUDA version it supports natively
    (``"12.4"``; None when NVML does not say) and the name of every GPU visible."""

    version: str
    cuda: str | None
    gpus: tuple[str, ...]


class MissingKind(enum.Enum):
    LIBRARY = "library"  # libnvidia-ml.so.1 is not in the container
    DRIVER = "driver"  # NVML is, but the node's kernel driver is not loaded
    ERROR = "error"  # NVML failed otherwise (permissions, ...)
    MODULE = "module"  # the image lacks nvidia-ml-py: a packaging bug


@dataclasses.dataclass(frozen=True)
class Missing:
    """No driver could be read: why, and NVML's words."""

    kind: MissingKind
    detail: str


class Outcome(enum.Enum):
    NATIVE = "native"
    FORWARD = "forward"
    MINOR = "minor"
    TOO_OLD = "too-old"
    NO_GPU = "no-gpu"
    NO_DRIVER = "no-driver"
    BAD_VERSION = "bad-version"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """Whether the pod may start (exit 0), why, and the message for the user."""

    ok: bool
    outcome: Outcome
    message: str


@dataclasses.dataclass(frozen=True)
class Options:
    require_gpu: bool = False  # no driver or no GPU visible is an error, not a skip
    strict: bool = False  # minor version compatibility is an error, not a warning
    datacenter: bool | None = None  # None: decide from the GPUs' names


# What to check when the container sees no driver or no GPU, in the user's terms.
CHECK_GPU_ACCESS = (
    "Check that the pod runs on a GPU node (kubectl get nodes -L nvidia.com/gpu.present), "
    "that this container asks for a GPU (resources.limits nvidia.com/gpu, or "
    "runtimeClassName: nvidia), and that the node has the NVIDIA driver and container toolkit "
    "(the GPU Operator installs both)."
)
UPGRADE = (
    "Upgrade the node's NVIDIA driver (with the GPU Operator: its driver version), "
    "or schedule the pod on nodes that have a newer one"
)


def describe_gpus(gpus: Iterable[str]) -> str:
    """``1 GPU (NVIDIA L4)``, ``8 GPUs (8x NVIDIA H100 80GB HBM3)``, ``no GPU visible``."""
    names = list(gpus)
    if not names:
        return "no GPU visible"
    counts = Counter(names)
    listed = ", ".join(n if c == 1 else f"{c}x {n}" for n, c in counts.items())
    return f"{len(names)} GPU{'s' if len(names) > 1 else ''} ({listed})"


def check(probe: Driver | Missing, requirement: Requirement, options: Options) -> Verdict:
    """The verdict on ``probe`` for an image that needs ``requirement``."""
    cuda = requirement.cuda
    if isinstance(probe, Missing):
        return _missing(probe, cuda, options)
    try:
        driver = DriverVersion.parse(probe.version)
    except ValueError:
        return Verdict(
            False,
            Outcome.BAD_VERSION,
            f"preflight FAILED: NVML reported the driver version {probe.version!r}, which the "
            f"preflight cannot read, so it cannot tell whether it runs this image's CUDA {cuda}. "
            f"CUDA {cuda} needs driver {requirement.native} or later.",
        )
    found = f"NVIDIA driver {driver}" + (f" (CUDA {probe.cuda})" if probe.cuda else "")
    where = describe_gpus(probe.gpus)
    if not probe.gpus and options.require_gpu:
        return Verdict(
            False,
            Outcome.NO_GPU,
            f"preflight FAILED: {found} is visible in this container but no GPU is, so this "
            f"image's CUDA {cuda} has nothing to run on. {CHECK_GPU_ACCESS} "
            "NVIDIA_VISIBLE_DEVICES=none or void also hides them.",
        )
    found = f"{found} on {where}" if probe.gpus else f"{found}, with no GPU visible,"
    needs = f"needs driver {requirement.native} or later"
    if driver >= requirement.native:
        return Verdict(
            True,
            Outcome.NATIVE,
            f"preflight ok: {found} runs this image's CUDA {cuda}, which {needs}",
        )

    datacenter = options.datacenter
    if datacenter is None:
        datacenter = bool(probe.gpus) and all(is_datacenter(n) for n in probe.gpus)
    branch_min = requirement.forward_branch(driver)
    if datacenter and branch_min is not None and driver >= branch_min:
        return Verdict(
            True,
            Outcome.FORWARD,
            f"preflight ok: {found} runs this image's CUDA {cuda} through CUDA forward "
            f"compatibility (a data-center GPU, R{branch_min.branch} >= {branch_min}); "
            f"natively CUDA {cuda} {needs}",
        )

    forward = requirement.describe_forward()
    alternatives = (
        f", or on a data-center GPU one of the forward-compatible branches {forward}"
        if forward
        else ""
    )
    why = _why_not_forward(driver, branch_min, probe.gpus, options)
    floor = requirement.minor_floor
    if floor is not None and driver >= floor:
        major = cuda.split(".")[0]
        core = (
            f"{found} is older than this image's CUDA {cuda} needs: driver {requirement.native} "
            f"or later{alternatives}{why}. It runs in CUDA minor version compatibility mode "
            f"(CUDA {major} on {floor} or later, without the newest CUDA features), which NVIDIA "
            f"does not support for this image. {UPGRADE}"
        )
        if options.strict:
            return Verdict(
                False,
                Outcome.MINOR,
                f"preflight FAILED: {core} (--strict is set; without it this is a warning).",
            )
        return Verdict(
            True,
            Outcome.MINOR,
            f"preflight ok, with a warning: {core} (--strict / INFERLINE_PREFLIGHT_STRICT=true "
            "makes this an error).",
        )
    return Verdict(
        False,
        Outcome.TOO_OLD,
        f"preflight FAILED: {found} is too old for this image's CUDA {cuda}, which {needs}"
        f"{alternatives}{why}. {UPGRADE}; started anyway, the container would fail with "
        f'"{INSUFFICIENT}".',
    )


def _why_not_forward(
    driver: DriverVersion,
    branch_min: DriverVersion | None,
    gpus: tuple[str, ...],
    options: Options,
) -> str:
    """Why a driver of a forward-compatible branch does not count ("" when its branch is none)."""
    if branch_min is None:
        return ""
    if driver < branch_min:
        return f"; R{branch_min.branch} is forward-compatible from {branch_min} on, not {driver}"
    if options.datacenter is False:
        return "; forward compatibility needs a data-center GPU, and --datacenter no is set"
    if not gpus:
        return "; forward compatibility needs a data-center GPU, and none is visible"
    names = ", ".join(dict.fromkeys(gpus))
    return (
        f"; R{branch_min.branch} is forward-compatible on data-center GPUs only, and {names} "
        "is not one (--datacenter yes / INFERLINE_PREFLIGHT_DATACENTER=yes overrides the name "
        "check)"
    )


def _missing(probe: Missing, cuda: str, options: Options) -> Verdict:
    what = {
        MissingKind.LIBRARY: "no NVIDIA driver is visible in this container",
        MissingKind.DRIVER: "the NVIDIA driver's library is in this container but the node's "
        "kernel driver is not loaded",
        MissingKind.ERROR: "NVML could not read the NVIDIA driver",
        MissingKind.MODULE: "this image cannot load NVML's Python bindings",
    }[probe.kind] + f" ({probe.detail})"
    if not options.require_gpu and probe.kind is not MissingKind.MODULE:  # a broken image fails
        return Verdict(
            True,
            Outcome.NO_DRIVER,
            f"preflight ok: {what}, so there is nothing to check (--require-gpu / "
            "INFERLINE_PREFLIGHT_REQUIRE_GPU=true makes this an error)",
        )
    check_what = {
        MissingKind.LIBRARY: CHECK_GPU_ACCESS,
        MissingKind.DRIVER: "Check the node: nvidia-smi on the host, or the logs of the GPU "
        "Operator's driver pod on it.",
        MissingKind.ERROR: CHECK_GPU_ACCESS,
        MissingKind.MODULE: "Rebuild the image: make images IMAGES=preflight.",
    }[probe.kind]
    return Verdict(
        False,
        Outcome.NO_DRIVER,
        f"preflight FAILED: {what}, so this image's CUDA {cuda} cannot run here. {check_what}",
    )
