"""make images: build every image of k8s/CONTRACT.md with docker or podman, tag it, push it.

    python -m tools.images --registry REGISTRY --tag TAG [--push] [NAME ...]

Each image is ``REGISTRY/inferline-NAME:TAG``, built from the repository root (the build
context every Dockerfile expects) with its Dockerfile and target; ``--push`` pushes each one
after it is built. The engine is docker or podman, whichever is installed and answers (``info``);
``--engine`` picks one. The models image packs build/model_repository: ``make model`` first.
Labels: the OCI source (``git remote get-url origin``, or ``--source``), version (the tag) and
revision (the commit). ``--dry-run`` prints the commands without an engine.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shlex
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL_REPOSITORY = Path("build/model_repository")
ENGINES = ("docker", "podman")
# Docker's grammar for a tag, and a loose one for a registry/namespace prefix (no scheme, no tag).
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_REGISTRY = re.compile(r"[a-z0-9]([a-z0-9._:-]*[a-z0-9])?(/[a-z0-9]([a-z0-9._-]*[a-z0-9])?)*")


@dataclasses.dataclass(frozen=True)
class Image:
    """One row of k8s/CONTRACT.md's image table."""

    name: str  # the registry repository is inferline-<name>
    dockerfile: str  # relative to the repository root, the build context
    target: str | None = None

    @property
    def repository(self) -> str:
        return f"inferline-{self.name}"


IMAGES = (
    Image("middleman", "services/middleman/Dockerfile"),
    Image("preprocess", "services/preprocess/Dockerfile", "cpu"),
    Image("preprocess-gpu", "services/preprocess/Dockerfile", "gpu"),
    Image("batcher", "services/batcher/Dockerfile"),
    Image("eds", "control/eds/Dockerfile"),
    Image("envoy", "envoy/Dockerfile"),
    Image("demo-client", "demo-client/Dockerfile"),
    Image("models", "models/Dockerfile"),
    Image("preflight", "preflight/Dockerfile"),
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
) -> list[Step]:
    """The commands that build (and push) ``images``; pure, no engine needed."""
    check_names(registry, tag)
    steps = []
    for image in images:
        ref = reference(registry, image, tag)
        argv = [engine, "build", "-f", image.dockerfile]
        if image.target:
            argv += ["--target", image.target]
        if platform:
            argv += ["--platform", platform]
        argv += ["-t", ref, "--build-arg", f"SOURCE_URL={source}"]
        argv += ["--label", f"org.opencontainers.image.version={tag}"]
        if revision:
            argv += ["--label", f"org.opencontainers.image.revision={revision}"]
        argv.append(".")
        steps.append(Step(image, ref, tuple(argv), (engine, "push", ref) if push else None))
    return steps


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def find_engine(
    wanted: str | None = None,
    which: Callable[[str], str | None] = shutil.which,
    run: Runner = subprocess.run,
) -> str:
    """docker or podman, whichever is installed and answers ``info``; ImagesError if none."""
    candidates = [wanted] if wanted else list(ENGINES)
    installed = [c for c in candidates if which(c)]
    if not installed:
        raise ImagesError(
            f"make images needs {' or '.join(candidates)}, and none is installed; install one "
            "(or build the Dockerfiles listed in k8s/CONTRACT.md with another builder)"
        )
    reasons = []
    for engine in installed:
        try:
            answer = run([engine, "info"], capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            reasons.append(f"{engine} info: {e}")
            continue
        if answer.returncode == 0:
            return engine
        said = (answer.stderr or answer.stdout).strip().splitlines()
        reasons.append(f"{engine} info exits {answer.returncode}: {said[-1] if said else ''}")
    raise ImagesError(
        f"{' and '.join(installed)} {'is' if len(installed) == 1 else 'are'} installed, but no "
        f"engine answers ({'; '.join(reasons)}): "
        "start the daemon (or podman's machine/socket) and run make images again"
    )


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


def execute(steps: Sequence[Step], run: Runner = subprocess.run) -> None:
    """Run each build (and push), printing progress; the engine's output streams through."""
    total = len(steps)
    for number, step in enumerate(steps, 1):
        target = f" --target {step.image.target}" if step.image.target else ""
        print(f"[{number}/{total}] building {step.reference} ({step.image.dockerfile}{target})")
        sys.stdout.flush()
        for argv in (step.build, step.push):
            if argv is None:
                continue
            if argv[1] == "push":
                print(f"[{number}/{total}] pushing {step.reference}", flush=True)
            result = run(list(argv), cwd=ROOT, check=False)
            if result.returncode != 0:
                raise ImagesError(
                    f"{shlex.join(argv)} failed (exit {result.returncode}); its output is above"
                )
    pushed = " and pushed" if steps and steps[0].push else ""
    print(f"built{pushed} {total} image{'s' if total != 1 else ''}")


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
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    args = parser.parse_args(argv)
    try:
        images = select(args.only)
        check_names(args.registry, args.tag)
        if any(i.name == "models" for i in images):
            check_model_repository()
        engine = (args.engine or ENGINES[0]) if args.dry_run else find_engine(args.engine)
        steps = plan(
            engine,
            args.registry,
            args.tag,
            images=images,
            push=args.push,
            source=args.source if args.source is not None else git("remote", "get-url", "origin"),
            revision=git("rev-parse", "HEAD"),
            platform=args.platform,
        )
        if args.dry_run:
            for step in steps:
                print(shlex.join(step.build))
                if step.push:
                    print(shlex.join(step.push))
            return 0
        print(f"{engine}: {len(steps)} images, context {ROOT}", flush=True)
        execute(steps)
    except ImagesError as e:
        print(f"make images: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
