"""The CLI's console (stderr): progress lines of up, down and scale. Tables go to stdout."""

from __future__ import annotations

from rich.console import Console

console = Console(stderr=True, soft_wrap=True)  # whole lines, also in logs and pipes


def plain(text: str) -> None:
    """Print ``text`` as it is (a log tail: no markup, no highlighting)."""
    console.print(text, markup=False, highlight=False)
