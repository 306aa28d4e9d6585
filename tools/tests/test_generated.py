"""A generated section is rewritten between its markers, or reported stale without a write."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.generated import Files, Section


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


def test_stale_files_fail_the_check_naming_the_command_and_are_rewritten_without_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, copy = tmp_path / "source.json", tmp_path / "copy.json"
    source.write_text("new", encoding="utf-8")
    copy.write_text("old", encoding="utf-8")

    def stale() -> list[str]:
        return [str(copy)] if copy.read_text(encoding="utf-8") != "new" else []

    def write() -> list[str]:
        written = stale()
        copy.write_text(source.read_text(encoding="utf-8"), encoding="utf-8")
        return written

    files = Files("copy", stale, write, "make sample")
    assert files.main("sample", None, ["--check"]) == 1
    assert f"{copy} is stale: run make sample" in capsys.readouterr().out
    assert copy.read_text(encoding="utf-8") == "old"
    assert files.main("sample", None, []) == 0
    assert f"wrote {copy}" in capsys.readouterr().out
    assert files.main("sample", None, ["--check"]) == 0
    assert files.main("sample", None, []) == 0
    assert "every copy is current" in capsys.readouterr().out
