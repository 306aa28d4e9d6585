"""What the repository commits but does not write by hand, rewritten or checked.

* :class:`Section`: a generated section of a Markdown page, the text between two markers.
  bench.report (docs/performance.md) and tools.configref (docs/configuration.md) write theirs
  with it; their tests run ``--check``, so a page that differs from what made it fails.
* :class:`Files`: whole files made from a source elsewhere (the dashboards' JSON from their
  Python, the monitoring components' copies of grafana/'s files), and the command line that
  rewrites or checks them.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
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


@dataclass(frozen=True)
class Files:
    what: str  # one of them, for the messages ("dashboard", "copy")
    stale: Callable[[], list[str]]  # those that differ from what their source makes
    write: Callable[[], list[str]]  # rewrite those; which were written
    command: str  # what rewrites them

    def main(self, prog: str, description: str | None, argv: Sequence[str] | None) -> int:
        """``prog [--check]``: rewrite the stale files, or (``--check``) name them and exit 1."""
        parser = argparse.ArgumentParser(prog=prog, description=description)
        parser.add_argument("--check", action="store_true", help="exit 1 if a file is stale")
        if parser.parse_args(argv).check:
            names = self.stale()
            for name in names:
                print(f"{name} is stale: run {self.command}")
            return 1 if names else 0
        written = self.write()
        print(f"wrote {', '.join(written)}" if written else f"every {self.what} is current")
        return 0
