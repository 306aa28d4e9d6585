"""`python -m inferline_models [--repository DIR] [--force]`: build the Triton model repository."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferline_models.export import DEFAULT_REPOSITORY, build_repository


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inferline_models",
        description="Export EfficientNet-Lite0 to ONNX and write a Triton model repository.",
    )
    parser.add_argument(
        "--repository",
        type=Path,
        default=DEFAULT_REPOSITORY,
        help="model repository directory (default: %(default)s)",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if the stamp matches")
    args = parser.parse_args(argv)
    try:
        build_repository(args.repository, force=args.force)
    except (RuntimeError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
