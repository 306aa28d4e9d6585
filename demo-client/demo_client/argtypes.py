"""The argparse types of the command line: each turns a flag's text into its value or says,
in words a person can act on, why it will not do."""

from __future__ import annotations

import argparse


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
