"""`make images` (tools/images.py) without an engine: the build plan tags, builds and pushes the
images of k8s/CONTRACT.md, refuses bad names and a missing model, finds an engine or says why
none answers, and a failed build names its step."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from k8s.tests.dockerfiles import IMAGES
from tools import images
from tools.containers import engine as engines

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


def test_the_build_plan_gives_the_shared_dockerfile_each_images_recipe() -> None:
    """docker/python.Dockerfile's images: the recipe's build arguments; no ports, target runtime."""
    steps = images.plan("docker", "r.example.com/t", "v1", images=images.select(["batcher"]))
    assert steps[0].build == (
        "docker", "build", "-f", "docker/python.Dockerfile",
        "-t", "r.example.com/t/inferline-batcher:v1",
        "--build-arg", "SOURCE_URL=",
        "--build-arg", "DIST=services/batcher",
        "--build-arg", "REQUIREMENTS=./common ./services/batcher",
        "--build-arg", "COMMAND=inferline-batcher",
        "--build-arg", "TITLE=inferline-batcher",
        "--build-arg", "DESCRIPTION=inferline's batcher: merges concurrent KServe v2 ModelInfer "
        "calls into full batches before the load balancer",
        "--build-arg", "PORTS=8092 9182",
        "--label", "org.opencontainers.image.version=v1",
        ".",
    )  # fmt: skip
    (preflight,) = images.plan("docker", "r", "v1", images=images.select(["preflight"]))
    argv = preflight.build
    assert argv[argv.index("--target") + 1] == "runtime"
    assert "COMMAND=inferline-preflight" in argv and "REQUIREMENTS=./preflight" in argv
    assert not [a for a in argv if a.startswith("PORTS=")]
    # an image with a Dockerfile of its own gets no recipe
    (models,) = images.plan("docker", "r", "v1", images=images.select(["models"]))
    assert [a for a in models.build if "=" in a and a.split("=")[0].isupper()] == ["SOURCE_URL="]


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
    assert lines[0].startswith(
        "docker build -f docker/python.Dockerfile -t r.example.com/t/inferline-batcher:v1 "
        "--build-arg SOURCE_URL= --build-arg DIST=services/batcher --build-arg "
        "'REQUIREMENTS=./common ./services/batcher' --build-arg COMMAND=inferline-batcher "
    )
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
