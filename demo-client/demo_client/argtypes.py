"""The argparse types of the command line: each turns a flag's text into its value or says,
in words a person can act on, why it will not do."""

from __future__ import annotations

import argparse

from demo_client import trace_view


def positive_int(text: str) -> int:
    """A count: 1 or more."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def positive_float(text: str) -> float:
    """A rate or a duration: more than 0."""
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def non_negative_float(text: str) -> float:
    """A wait: 0 or more."""
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def port(text: str) -> int:
    """A TCP port to listen on; 0 lets the system pick a free one."""
    value = int(text)
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"must be a TCP port (0: any free one), not {value}")
    return value


def trace_view_template(text: str) -> str:
    """A trace viewer's link: an http(s) URL with ``{trace_id}`` in it, or ``''`` for none."""
    try:
        return trace_view.check_template(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
