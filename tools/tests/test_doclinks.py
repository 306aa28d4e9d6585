"""Every link of the project's Markdown (README.md, docs/, each folder's own README) leads
somewhere: each relative file exists, each #anchor is a heading of its file, as GitHub spells it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import doclinks

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = sorted(  # not what tools installed or runs wrote (.venv, .run, caches), nor build/
    page
    for page in ROOT.rglob("*.md")
    if not any(part.startswith(".") or part in ("build", "node_modules")
               for part in page.relative_to(ROOT).parts)
)  # fmt: skip


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_link_of_the_docs_leads_somewhere(page: Path) -> None:
    assert not doclinks.broken(page)


def test_the_docs_link_to_each_other() -> None:
    """The README reaches every page of docs/ (none is an orphan)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {target.partition("#")[0] for _, target in doclinks.links(readme)}
    assert DOCS and {f"docs/{page.name}" for page in DOCS} <= linked


def test_anchors_are_spelt_as_github_spells_them() -> None:
    text = "# Call it: gRPC, REST, `curl`\n## Web view\n## Web view\n```\n# not a heading\n```\n"
    assert doclinks.anchors(text) == {"call-it-grpc-rest-curl", "web-view", "web-view-1"}


def test_a_missing_file_or_heading_is_reported_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n[ok](other.md#other) [self](#page) [web](https://example.com/x#y)\n"
        "[gone](missing.md)\n[no heading](other.md#nowhere) `[code](skipped.md)`\n"
        "```\n[fenced](skipped.md)\n```\n[self](#nowhere)\n",
        encoding="utf-8",
    )
    problems = doclinks.broken(page)
    assert len(problems) == 3, problems
    assert problems[0].startswith(f"{page}:3: missing.md: no such file")
    assert problems[1] == f"{page}:4: other.md#nowhere: other.md has no heading #nowhere"
    assert problems[2] == f"{page}:8: #nowhere: page.md has no heading #nowhere"
    assert doclinks.main([str(page)]) == 1
