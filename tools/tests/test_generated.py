"""A generated section is rewritten between its markers, or reported stale without a write."""

from __future__ import annotations

from pathlib import Path

from tools.generated import Section


def test_a_stale_section_fails_the_check_and_is_rewritten_without_it(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- a -->\nold\n<!-- b -->\nend\n", encoding="utf-8")
    section = Section("sample", page, "<!-- a -->", "<!-- b -->", "make sample")
    fresh = "<!-- a -->\nnew\n<!-- b -->"
    assert section.update(fresh, check=True) == 1
    assert "old" in page.read_text(encoding="utf-8")
    assert section.update(fresh, check=False) == 0
    assert page.read_text(encoding="utf-8") == "intro\n<!-- a -->\nnew\n<!-- b -->\nend\n"
    assert section.update(fresh, check=True) == 0
