"""Stand-in base images, for a machine that cannot pull the project's bases.

The Dockerfiles build ``FROM python:3.11.11-slim-bookworm`` and ``FROM busybox:1.37.0``, and the
manifests run NVIDIA's Triton image. Where a registry is reachable these are pulled, and nothing
here runs. Where one is not (an air-gapped CI runner, a sandbox that reaches only Debian's and
PyPI's package indexes), :func:`ensure` makes a stand-in from those packages and gives it the
real image's name, so that the Dockerfiles and the manifests run unchanged:

- ``python``: Debian bookworm (``debootstrap --variant=minbase``) with Debian's Python 3.11
  (python3, python3-venv, libpython3.11), ``python`` at ``/usr/local/bin`` as in the official
  image; docs, manuals, locales and apt's lists left out;
- ``busybox``: Debian's ``busybox-static``, one link per applet;
- Triton: PyTriton's Triton server binary laid out as NVIDIA's image has it, with a
  Python-based ONNX Runtime backend (``tools/containers/triton/``), built on the Python base.

Every stand-in is labelled ``io.inferline.stand-in=<the image it stands for>`` and says so in
``org.opencontainers.image.description``. The label is inherited by every image built on it, so
``make images PUSH=1`` refuses to push one: a stand-in never leaves this machine.

    python -m tools.containers.standins [--force] [REF ...]   # default: every base the project uses
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from tools.containers.engine import Engine, EngineError, find_engine, pip_trust_mounts

ROOT = Path(__file__).resolve().parents[2]
LABEL = "io.inferline.stand-in"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
SUITE = "bookworm"
PYTHON = "python:3.11.11-slim-bookworm"
BUSYBOX = "busybox:1.37.0"
TRITON = "nvcr.io/nvidia/tritonserver:24.10-py3"
TRITON_FILES = Path(__file__).with_name("triton")
# What the minimal Debian needs beyond minbase for the Dockerfiles: python3 and venv (the build
# stage's `python -m venv`), libpython (Triton's Python backend stub embeds it).
PYTHON_PACKAGES = ("python3", "python3-venv", "libpython3.11")
# Left out of the Python stand-in: nothing in an image reads them.
PRUNED = ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info")


class StandInError(Exception):
    """A stand-in could not be made; the message says what to install or run."""


def full_name(reference: str) -> str:
    """The name an engine gives a short reference: ``busybox:1.37.0`` ->
    ``docker.io/library/busybox:1.37.0`` (what ``FROM busybox:1.37.0`` resolves to)."""
    first = reference.split("/", 1)[0]
    if "/" not in reference:
        return f"docker.io/library/{reference}"
    if "." in first or ":" in first or first == "localhost":
        return reference
    return f"docker.io/{reference}"


def description(stands_for: str, made_of: str) -> str:
    return (
        f"inferline stand-in for {stands_for}: {made_of}; made by tools/containers/standins.py "
        "where the image cannot be pulled; never push it"
    )


def stand_in_of(engine: Engine, reference: str) -> str | None:
    """The image ``reference`` stands in for, if it is (or was built on) a stand-in."""
    template = f'{{{{index .Config.Labels "{LABEL}"}}}}'  # docker's and podman's field
    done = engine.run("image", "inspect", "--format", template, reference)
    value = done.stdout.strip()
    return value if value and value != "<no value>" else None


def present(engine: Engine, reference: str) -> bool:
    return engine.run("image", "inspect", reference, check=False).returncode == 0


def pull(engine: Engine, reference: str) -> bool:
    """Whether ``reference`` could be pulled; prints why not."""
    done = engine.run("pull", "--quiet", reference, check=False, timeout=1800)
    if done.returncode == 0:
        return True
    said = (done.stderr or done.stdout).strip().splitlines()
    print(f"  cannot pull {reference}: {said[-1] if said else f'exit {done.returncode}'}")
    return False


def need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise StandInError(f"a stand-in needs {tool}: apt-get install {package}")
    return path


def run(argv: Sequence[str], what: str) -> None:
    done = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise StandInError(f"{what}: {' '.join(argv)} failed (exit {done.returncode}):\n{tail}")


def import_rootfs(
    engine: Engine, rootfs: Path, reference: str, stands_for: str, made_of: str, cmd: str
) -> None:
    """``rootfs`` as image ``reference`` (the engine's ``import``), labelled a stand-in."""
    changes = [
        f"LABEL {LABEL}={stands_for}",
        f'LABEL org.opencontainers.image.description="{description(stands_for, made_of)}"',
        f"CMD {cmd}",
    ]
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    argv = engine.argv("import", *(a for c in changes for a in ("--change", c)), "-", reference)
    done = subprocess.run(argv, stdin=tar.stdout, env=engine.environ(), capture_output=True)
    if tar.stdout is not None:
        tar.stdout.close()
    tar.wait()
    if done.returncode != 0 or tar.returncode != 0:
        raise StandInError(f"importing {reference}: {done.stderr.decode(errors='replace')}")


def make_python(engine: Engine, reference: str, work: Path) -> None:
    debootstrap = need("debootstrap", "debootstrap")
    rootfs = work / "rootfs"
    print(f"  debootstrap {SUITE} with {', '.join(PYTHON_PACKAGES)} (about a minute)", flush=True)
    run(
        [
            debootstrap, "--variant=minbase", f"--include={','.join(PYTHON_PACKAGES)}",
            SUITE, str(rootfs), DEBIAN_MIRROR,
        ],
        "debootstrap",
    )  # fmt: skip
    for path in [p for pruned in PRUNED for p in (rootfs / pruned).iterdir()]:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    for locale in (rootfs / "usr/share/locale").iterdir():
        if locale.is_dir():
            shutil.rmtree(locale)
    (rootfs / "usr/local/bin/python").symlink_to("/usr/bin/python3")
    made_of = f"Debian {SUITE} (debootstrap minbase) with Debian's Python 3.11"
    import_rootfs(engine, rootfs, reference, reference, made_of, '["python3"]')


def make_busybox(engine: Engine, reference: str, work: Path) -> None:
    need("apt-get", "apt")
    need("dpkg-deb", "dpkg")
    run(["sh", "-c", f"cd {work} && apt-get download busybox-static"], "apt-get download")
    deb = next(work.glob("busybox-static_*.deb"))
    rootfs = work / "rootfs"
    run(["dpkg-deb", "-x", str(deb), str(rootfs)], "dpkg-deb")
    busybox = rootfs / "bin" / "busybox"
    applets = subprocess.run(
        [str(busybox), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    for applet in applets:
        link = rootfs / "bin" / applet
        if not link.exists():
            link.symlink_to("busybox")
    (rootfs / "tmp").mkdir(mode=0o1777, exist_ok=True)
    for folder in ("usr/share/doc", "usr/share/man"):
        shutil.rmtree(rootfs / folder, ignore_errors=True)
    made_of = f"Debian {SUITE}'s busybox-static ({deb.name})"
    import_rootfs(engine, rootfs, reference, reference, made_of, '["sh"]')


def make_triton(engine: Engine, reference: str, work: Path) -> None:
    ensure(engine, [PYTHON])  # built on the Python base, real or stand-in
    context = work / "context"
    shutil.copytree(TRITON_FILES, context)
    shutil.copy(ROOT / "constraints.txt", context / "constraints.txt")
    print("  building on the Python base: PyTriton's Triton, ONNX Runtime (a minute or two)")
    engine.run(
        "build", *pip_trust_mounts(engine), "--build-arg", f"BASE={PYTHON}",
        "--build-arg", f"STANDS_FOR={reference}", "-t", reference, str(context),
        capture=False,
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class StandIn:
    stands_for: str
    make: Callable[[Engine, str, Path], None]


STAND_INS = {
    full_name(PYTHON): StandIn(PYTHON, make_python),
    full_name(BUSYBOX): StandIn(BUSYBOX, make_busybox),
    full_name(TRITON): StandIn(TRITON, make_triton),
}


def bases(dockerfiles: Iterable[Path]) -> list[str]:
    """The images the Dockerfiles build FROM (not their own stages), in order, once each."""
    found: list[str] = []
    for dockerfile in dockerfiles:
        stages: set[str] = set()
        # instructions, not lines: a line ending in a backslash continues the one before
        text = re.sub(r"\\\n", " ", dockerfile.read_text("utf-8"))
        for line in text.splitlines():
            match = re.match(r"(?i)FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", line.strip())
            if not match:
                continue
            image, stage = match.groups()
            if image not in stages and not image.startswith("$") and image not in found:
                found.append(image)
            if stage:
                stages.add(stage)
    return found


def ensure(engine: Engine, references: Iterable[str], force: bool = False) -> list[str]:
    """Each of ``references`` present: as it is, pulled, or else made as a stand-in (the ones
    this module knows). The references that are stand-ins now."""
    standing_in = []
    for reference in references:
        name = full_name(reference)
        if not force and present(engine, name):
            if stand_in_of(engine, name):
                standing_in.append(reference)
            continue
        known = STAND_INS.get(name)
        if not force and pull(engine, reference):
            continue
        if known is None:
            raise StandInError(f"{reference} is not here and cannot be pulled; no stand-in exists")
        print(f"making a stand-in for {reference}", flush=True)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="inferline-stand-in-") as work:
            known.make(engine, name, Path(work))
        print(f"  {name}: stand-in ready in {time.monotonic() - started:.0f} s", flush=True)
        standing_in.append(reference)
    return standing_in


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.containers.standins",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("references", nargs="*", metavar="REF", help=", ".join(STAND_INS))
    parser.add_argument("--force", action="store_true", help="make them even if present")
    args = parser.parse_args(argv)
    try:
        engine = find_engine()
        wanted = args.references or [s.stands_for for s in STAND_INS.values()]
        made = ensure(engine, wanted, force=args.force)
    except (EngineError, StandInError) as e:
        print(f"stand-ins: {e}", file=sys.stderr)
        return 1
    print(f"stand-ins in use: {', '.join(made) or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
