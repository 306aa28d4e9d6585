"""make check-packages: every deployable installed alone, as its image would get it, then started.

Every workspace distribution is built into a wheel once (what a container image gets, not an
editable install). Then, for each deployable: a fresh virtual environment, ``pip install -c
constraints.txt`` of its wheel and of the sibling wheels its pyproject.toml names, and its smoke
command (``--help``, or importing its entry module). A dependency a pyproject.toml forgets
fails the command, and so does a file the wheel forgets (the Envoy template). Wheels,
environments and logs go under ``build/check-packages/``.

    python -m tools.check_packages                  # every deployable, two at a time
    python -m tools.check_packages eds batcher      # some of them
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
WORK = ROOT / "build" / "check-packages"
LOG_TAIL = 40


@dataclass(frozen=True)
class Deployable:
    name: str
    folder: str  # holds its pyproject.toml
    smoke: tuple[str, ...]  # python arguments that must exit 0 in its environment


DEPLOYABLES = (
    Deployable("middleman", "services/middleman", ("-m", "middleman", "--help")),
    Deployable("preprocess", "services/preprocess", ("-m", "preprocess", "--help")),
    Deployable("batcher", "services/batcher", ("-m", "batcher", "--help")),
    Deployable("eds", "control/eds", ("-m", "eds", "--help")),
    # Renders the packaged template: proves it ships in the wheel.
    Deployable("envoy", "envoy", ("-m", "inferline_envoy.config", "--local")),
    # Imports the CLI (the web view's aiohttp too) and reads the page from the package: proves
    # the web view's files ship in the wheel.
    Deployable(
        "demo-client",
        "demo-client",
        ("-c", "import demo_client.cli, demo_client.web as web; web.load_assets()"),
    ),
    Deployable("models", "models", ("-m", "inferline_models", "--help")),
    Deployable("stack", "stack", ("-m", "inferline_stack", "--help")),
    # No GPU here: reads NVML (or says it cannot) and exits 0; proves pynvml is in the image.
    Deployable("preflight", "preflight", ("-m", "inferline_preflight", "--termination-log", "")),
    Deployable(
        "testing",
        "testing",
        (
            "-c",
            "import inferline_testing.harness, inferline_testing.media, "
            "inferline_testing.fake_backend",
        ),
    ),
)


def distribution(folder: Path) -> tuple[str, list[str]]:
    """(name, dependency names) from ``folder``'s pyproject.toml."""
    project = tomllib.loads((folder / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = [re.split(r"[\[<>=!~; ]", dep, maxsplit=1)[0] for dep in project["dependencies"]]
    return project["name"], names


def workspace() -> dict[str, Path]:
    """Every distribution of the workspace, by name: its folder."""
    found = [*ROOT.glob("*/pyproject.toml"), *ROOT.glob("*/*/pyproject.toml")]
    folders = [p.parent for p in found if not p.parts[len(ROOT.parts)].startswith((".", "build"))]
    return {distribution(f)[0]: f for f in folders}


def siblings(folder: Path, local: dict[str, Path]) -> list[Path]:
    """``folder`` and every workspace distribution it needs, directly or not."""
    needed, todo = [folder], [folder]
    while todo:
        for name in distribution(todo.pop())[1]:
            if name in local and local[name] not in needed:
                needed.append(local[name])
                todo.append(local[name])
    return needed


def run(argv: list[str], log: Path) -> bool:
    with log.open("a", encoding="utf-8") as out:
        out.write(f"$ {' '.join(argv)}\n")
        out.flush()
        return (
            subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False).returncode == 0
        )


def build_wheels(local: dict[str, Path]) -> dict[Path, Path]:
    """Every distribution's wheel, built one after the other; {folder: wheel}."""
    wheels = WORK / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    log = WORK / "wheels.log"
    log.unlink(missing_ok=True)
    built = {}
    for name, folder in sorted(local.items()):
        argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(wheels)]
        if not run([*argv, str(folder)], log):
            sys.exit(f"cannot build {name}'s wheel; see {log}")
        # setuptools builds in the source folder; leave it as it was.
        shutil.rmtree(folder / "build", ignore_errors=True)
        for info in folder.glob("*.egg-info"):
            shutil.rmtree(info, ignore_errors=True)
        built[folder] = next(wheels.glob(f"{name.replace('-', '_')}-*.whl"))
    return built


def check(
    deployable: Deployable, local: dict[str, Path], wheels: dict[Path, Path]
) -> tuple[bool, float, Path]:
    """Install ``deployable`` alone into a new environment and run its smoke command."""
    start = time.monotonic()
    venv = WORK / deployable.name
    shutil.rmtree(venv, ignore_errors=True)
    venv.mkdir(parents=True)
    log = WORK / f"{deployable.name}.log"
    log.unlink(missing_ok=True)
    python = str(venv / "bin" / "python")
    needed = [str(wheels[f]) for f in siblings(ROOT / deployable.folder, local)]
    pip = [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check"]
    ok = (
        run([sys.executable, "-m", "venv", "--without-pip", str(venv)], log)
        and run([*pip, "install", "--quiet", "-c", str(CONSTRAINTS), *needed], log)
        and run([*pip, "list", "--format=freeze"], log)  # what the image would hold, for the log
        and run([python, *deployable.smoke], log)
    )
    if ok:
        shutil.rmtree(venv, ignore_errors=True)  # gigabytes each; the log stays
    return ok, time.monotonic() - start, log


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.check_packages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    names = [d.name for d in DEPLOYABLES]
    parser.add_argument(
        "only", nargs="*", metavar="DEPLOYABLE", help=f"some of: {', '.join(names)}"
    )
    parser.add_argument("--jobs", type=int, default=2, help="environments built at once")
    args = parser.parse_args(argv)
    if unknown := set(args.only) - set(names):
        parser.error(f"unknown deployables {sorted(unknown)}; choose from {', '.join(names)}")
    chosen = [d for d in DEPLOYABLES if not args.only or d.name in args.only]
    local = workspace()
    WORK.mkdir(parents=True, exist_ok=True)
    failed = []
    print(f"building {len(local)} wheels in {WORK / 'wheels'}", flush=True)
    wheels = build_wheels(local)
    print(f"installing {len(chosen)} deployables alone, {args.jobs} at a time", flush=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {d.name: pool.submit(check, d, local, wheels) for d in chosen}
        for name, future in futures.items():
            ok, seconds, log = future.result()
            print(f"  {'ok  ' if ok else 'FAIL'} {name:<12} {seconds:6.0f} s  ({log})", flush=True)
            if not ok:
                failed.append(name)
                tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL:]
                print("\n".join("       " + line for line in tail))
    if failed:
        print(f"{len(failed)} of {len(chosen)} failed: {', '.join(failed)}")
        return 1
    print(f"all {len(chosen)} install alone and start")
    return 0


if __name__ == "__main__":
    sys.exit(main())
