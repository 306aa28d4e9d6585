"""Every image of k8s/CONTRACT.md, built here, and what a cluster would check of it."""

from __future__ import annotations

import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from inferline_testing.waits import wait_until
from tests.containers.support import ROWS, TAG, record_ready
from tools import images
from tools.containers import checks, standins
from tools.containers.engine import Engine

NAMES = [i.name for i in images.IMAGES]
RECIPES = {i.name: i.recipe for i in images.IMAGES if i.recipe}  # docker/python.Dockerfile's
# What the pods run with (k8s/base): a cluster applies the same to every image.
RESTRICTED = (
    "--read-only", "--read-only-tmpfs=false", "--mount=type=tmpfs,destination=/tmp",
    "--cap-drop=all", "--security-opt=no-new-privileges",
)  # fmt: skip


def test_every_image_of_the_contract_is_built(built: dict[str, str]) -> None:
    assert sorted(built) == sorted(NAMES)
    assert all(ROWS[name].built and ROWS[name].size_bytes > 0 for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_image_runs_as_a_numeric_non_root_user(
    name: str, engine: Engine, built: dict[str, str]
) -> None:
    user = checks.facts(engine, built[name]).user
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) != 0, f"{name}: USER {user!r}"
    assert gid.isdigit() and int(gid) != 0, f"{name}: USER {user!r}"


@pytest.mark.parametrize("name", NAMES)
def test_the_image_is_labelled_its_repository(
    name: str, engine: Engine, built: dict[str, str]
) -> None:
    found = checks.facts(engine, built[name]).labels
    assert found.get("org.opencontainers.image.title") == f"inferline-{name}"
    assert len(found.get("org.opencontainers.image.description", "")) > 20
    assert found.get("org.opencontainers.image.version") == TAG
    recipe = RECIPES.get(name)
    assert recipe is None or found["org.opencontainers.image.description"] == recipe.description


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_the_shared_recipe_gives_each_image_its_ports_and_command(
    name: str, engine: Engine, built: dict[str, str]
) -> None:
    """docker/python.Dockerfile with the image's build arguments: its ports, and the one
    exec-form ENTRYPOINT a link to its command (tools/images.py's recipe, the contract's)."""
    recipe = RECIPES[name]
    found = checks.facts(engine, built[name])
    assert found.ports == set(recipe.ports)
    assert found.entrypoint == [images.ENTRYPOINT]
    with checks.mounted(engine, built[name]) as rootfs:
        link = rootfs / "opt" / "venv" / "bin" / images.ENTRYPOINT
        assert link.is_symlink() and str(link.readlink()) == recipe.command
        assert (link.parent / recipe.command).is_file()


@pytest.mark.parametrize("name", NAMES)
def test_the_runtime_image_carries_no_compiler_installer_pip_cache_or_test(
    name: str, engine: Engine, built: dict[str, str]
) -> None:
    with checks.mounted(engine, built[name]) as rootfs:
        assert checks.unwanted(rootfs) == []


@pytest.mark.parametrize("name", NAMES)
def test_an_image_built_on_a_stand_in_says_so_and_is_never_pushed(
    name: str, engine: Engine, built: dict[str, str]
) -> None:
    """The stand-in's label is inherited by what is built on it, and make images refuses to
    push such an image before it tries (the registry here does not exist)."""
    base = standins.stand_in_of(engine, built[name])
    if base is None:
        pytest.skip(f"{name} is built on its real base (pulled)")
    assert base in {standins.full_name(b) for b in standins.bases(images.dockerfiles())}
    registry = "registry.invalid/inferline"
    engine.run("tag", built[name], f"{registry}/inferline-{name}:{TAG}")
    try:
        (step,) = images.plan(engine.name, registry, TAG, images=images.select([name]), push=True)
        step = images.Step(step.image, step.reference, ("true",), step.push)
        with pytest.raises(images.ImagesError, match=r"built on a stand-in .* never pushed"):
            images.execute([step], engine)
    finally:
        engine.run("rmi", f"{registry}/inferline-{name}:{TAG}", check=False)


def test_the_preflight_image_explains_a_node_without_a_gpu(
    engine: Engine, built: dict[str, str]
) -> None:
    """The GPU pods' init container (components/preflight, which requires a GPU), on a node
    with no NVIDIA driver: a failure with a readable reason, not a crash."""
    started = time.monotonic()
    done = engine.run(
        "run", "--rm", *RESTRICTED, "--env=INFERLINE_PREFLIGHT_REQUIRE_GPU=true",
        built["preflight"], "--termination-log", "/tmp/termination-log",
        check=False, timeout=120,
    )  # fmt: skip
    record_ready("preflight", time.monotonic() - started, "its check done (an init container)")
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in said
    assert "libnvidia-ml.so.1" in said, said


def test_the_gpu_preprocess_image_serves_without_a_gpu_and_stops_on_sigterm(
    engine: Engine, built: dict[str, str]
) -> None:
    """The DALI image of the gpu overlay, started as the remote placement's preprocess pool
    (no GPU here: DALI's CPU decoders): healthy over gRPC, then a clean stop on SIGTERM."""
    name = "inferline-test-preprocess-gpu"
    engine.run("rm", "--force", name, check=False)
    engine.run(
        "run", "--detach", f"--name={name}", "--user=10001:10001", *RESTRICTED,
        "--env=INFERLINE_PREPROCESS_HOST=0.0.0.0", "--env=INFERLINE_PREPROCESS_BACKEND=dali-cpu",
        built["preprocess-gpu"],
    )  # fmt: skip
    try:
        started = time.monotonic()
        ip = engine.run(
            "inspect", "--format", "{{.NetworkSettings.IPAddress}}", name
        ).stdout.strip()

        def serving() -> bool:
            with grpc.insecure_channel(f"{ip}:8091") as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                try:
                    answer = stub.Check(health_pb2.HealthCheckRequest(), timeout=1)
                except grpc.RpcError:
                    return False
            return bool(answer.status == health_pb2.HealthCheckResponse.SERVING)

        wait_until(serving, 120, "the GPU preprocess image's gRPC health")
        record_ready("preprocess-gpu", time.monotonic() - started, "gRPC health (DALI on the CPU)")
        stopping = time.monotonic()
        engine.run("stop", "--time=30", name, timeout=60)
        code = engine.run("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip()
        assert code == "0" and time.monotonic() - stopping < 30
    finally:
        engine.run("rm", "--force", name, check=False)
