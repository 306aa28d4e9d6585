"""What the docs name exists: every ``make`` target they tell a reader to run is a target of the
Makefile, and every repository path they name in backticks is a file or folder of the
repository. Every kustomize component has a README.md, linked from k8s/README.md, and every file
it names is there. (Ports are held by tests/e2e/test_exposure.py, defaults by the generated
configuration reference, links by test_doclinks.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPONENTS = ROOT / "k8s" / "components"
COMPONENT_NAMES = sorted(p.name for p in COMPONENTS.iterdir() if p.is_dir())
PAGES = sorted(
    [ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("*/README.md"),
     *ROOT.glob("*/*/README.md"), ROOT / "k8s" / "CONTRACT.md", *COMPONENTS.glob("*/README.md")]
)  # fmt: skip
TOP = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))
MADE = ("build/", ".run/", ".venv")  # what set-up and the stack make, absent from a clone
_MAKE = re.compile(r"`make ([a-z][a-z0-9-]*)")
_TARGET = re.compile(r"^([a-zA-Z0-9_-]+):", re.M)
_TOPS = "|".join(map(re.escape, TOP))
_PATH = re.compile(rf"`((?:{_TOPS})/[^`\s]*)`")
# A file a component's README names by itself: `hpa.yaml`, `rules/autoscaling.yml`,
# `../tls/certificate.yaml` (not an absolute path in a container, nor a Secret's key `jwks.json`).
_FILE = re.compile(r"(?<!key )`([\w.][\w./-]*\.(?:ya?ml|json))`")


def named(pattern: re.Pattern[str]) -> list[tuple[str, str]]:
    """(page, what it names), but what a command is said to write (an output, made by running
    it)."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in pattern.finditer(text):
            if not re.search(
                r"\bwrites? (to )?$", text[max(0, match.start() - 10) : match.start()]
            ):
                found.append((str(page.relative_to(ROOT)), match.group(1)))
    return found


def test_every_make_target_the_docs_name_exists() -> None:
    targets = set(_TARGET.findall((ROOT / "Makefile").read_text(encoding="utf-8")))
    missing = sorted({(page, target) for page, target in named(_MAKE) if target not in targets})
    assert missing == []


@pytest.mark.parametrize("page", [str(p.relative_to(ROOT)) for p in PAGES])
def test_every_repository_path_a_page_names_exists(page: str) -> None:
    missing = []
    for where, path in named(_PATH):
        if where != page or path.startswith(MADE) or re.search(r"[*<>{}$]|\.\.\.|…", path):
            continue
        clean = re.split(r"::|:\d|#", path)[0].rstrip(".,;:)")
        here = (ROOT / page).parent  # a component's README names its own files from its folder
        if not (ROOT / clean).exists() and not (here / clean).exists():
            missing.append(path)
    assert missing == []


def test_every_component_has_a_readme_that_k8s_readme_links() -> None:
    """Each kustomize component says what it changes, when to use it, what it needs and its
    settings in its own README.md (as Online Boutique's components do), linked from
    k8s/README.md's table."""
    assert COMPONENT_NAMES
    missing = [name for name in COMPONENT_NAMES if not (COMPONENTS / name / "README.md").is_file()]
    assert missing == []
    index = (ROOT / "k8s" / "README.md").read_text(encoding="utf-8")
    unlinked = [name for name in COMPONENT_NAMES if f"(components/{name}/README.md)" not in index]
    assert unlinked == []


@pytest.mark.parametrize("name", COMPONENT_NAMES)
def test_every_file_a_component_readme_names_exists(name: str) -> None:
    """The files a component's README names (its own, from its folder; others from the
    repository's root) are there, and it shows the line that includes it in an overlay."""
    folder = COMPONENTS / name
    assert (folder / "README.md").is_file(), f"k8s/components/{name} has no README.md"
    text = (folder / "README.md").read_text(encoding="utf-8")
    named_files = {match.group(1) for match in _FILE.finditer(text)}
    missing = sorted(
        path
        for path in named_files
        if not path.startswith(MADE) and not (folder / path).exists() and not (ROOT / path).exists()
    )
    assert missing == []
    assert f"components: [../../components/{name}]" in text
