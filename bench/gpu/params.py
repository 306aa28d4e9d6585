"""The benchmark's parameters: its parts, the model, how long each measurement takes, and the
command line that chooses among them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import bench.gpu
from bench.benchlib import RESULTS

PARTS = ("decode", "model", "pipeline")
MODEL = "efficientnet_lite0"
DEFAULT_DURATION_S = 12.0
# Triton's start: TensorRT builds its engine the first time (a minute or two); then cached.
START_TIMEOUT_S = 600.0


def _parts(text: str) -> tuple[str, ...]:
    chosen = {p.strip() for p in text.split(",") if p.strip()}
    if not chosen or not chosen <= set(PARTS):
        raise argparse.ArgumentTypeError(f"a comma-separated choice of {','.join(PARTS)}")
    return tuple(p for p in PARTS if p in chosen)  # always in the order above


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.gpu",
        description=bench.gpu.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--duration",
        type=_positive_float,
        default=DEFAULT_DURATION_S,
        help="seconds per measurement (default %(default)g: the whole run in about 7 minutes)",
    )
    parser.add_argument(
        "--parts",
        type=_parts,
        default=PARTS,
        help=f"which parts, comma-separated (default: {','.join(PARTS)})",
    )
    parser.add_argument(
        "--skip-if-no-gpu",
        action="store_true",
        help="without a CUDA GPU print SKIPPED and exit 0 (CI) instead of exiting 2",
    )
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "gpu.json", help="default: %(default)s"
    )
    return parser.parse_args(argv)
