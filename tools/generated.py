"""A generated section of a Markdown page: the text between two markers, rewritten or checked.

bench.report (docs/performance.md) and tools.configref (docs/configuration.md) write theirs
with it; their tests run ``--check``, so a page that differs from what made it fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Section:
    name: str  # what it holds, for the messages
    page: Path
    start: str
    end: str
    command: str  # what regenerates it

    def render(self, text: str, generated: str) -> str:
        """``text`` with the markers and what lies between them replaced by ``generated``."""
        try:
            head, rest = text.split(self.start, 1)
            _, tail = rest.split(self.end, 1)
        except ValueError:
            raise SystemExit(
                f"{self.page} has no {self.name} markers ({self.start!r} … {self.end!r})"
            ) from None
        return head + generated + tail

    def update(self, generated: str, check: bool) -> int:
        """Rewrite the page's section; with ``check``, only say whether it is stale (exit 1)."""
        text = self.page.read_text(encoding="utf-8")
        new = self.render(text, generated)
        if check:
            if new != text:
                print(f"{self.page}'s {self.name} section is stale: run {self.command}")
                return 1
            return 0
        self.page.write_text(new, encoding="utf-8")
        print(f"rewrote the {self.name} section of {self.page}")
        return 0
