"""Broken links in Markdown: relative file links and ``#anchors``, as GitHub renders them.

    python -m tools.doclinks README.md docs/*.md    # print each broken link; exit 1 if any

A link is ``[text](target)`` outside code (fenced blocks and inline code are skipped); web
addresses (``scheme:``) are not followed. A relative target must exist (a file or a folder) from
the linking file's folder; an anchor, alone or after a Markdown file, must be a heading of that
file, spelt as GitHub spells it (lower case, punctuation dropped, spaces as hyphens; a repeated
heading gets ``-1``, ``-2``, ...).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

_FENCE = re.compile(r"^\s*(```|~~~)")
_CODE_SPAN = re.compile(r"(`+).*?\1")
_LINK = re.compile(r"\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def prose(text: str) -> Iterator[tuple[int, str]]:
    """``text``'s lines outside fenced code blocks, numbered from 1, inline code removed."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, _CODE_SPAN.sub("", line)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"<[^>]+>", "", heading).replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """Every heading anchor of a Markdown text, repeats numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else _HEADING.match(line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(text: str) -> Iterator[tuple[int, str]]:
    """(line, target) of every link outside code."""
    for number, line in prose(text):
        for match in _LINK.finditer(line):
            yield number, match.group(1)


def broken(path: Path) -> list[str]:
    """``path:line: target: why`` for each link of ``path`` that leads nowhere."""
    text = path.read_text(encoding="utf-8")
    problems = []
    for number, target in links(text):
        if _SCHEME.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        where = (path.parent / file_part).resolve() if file_part else path.resolve()
        if not where.exists():
            problems.append(f"{path}:{number}: {target}: no such file {where}")
        elif anchor and where.suffix == ".md":
            target_text = text if where == path.resolve() else where.read_text(encoding="utf-8")
            if anchor not in anchors(target_text):
                problems.append(f"{path}:{number}: {target}: {where.name} has no heading #{anchor}")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("files", nargs="+", type=Path, help="Markdown files to check")
    args = parser.parse_args(argv)
    problems = [problem for path in args.files for problem in broken(path)]
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
