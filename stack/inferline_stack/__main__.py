"""python -m inferline_stack up|down|status|scale: the local stack as background processes.

python -m inferline_stack up [--name value ...]        # INFERLINE_STACK_* or flags
python -m inferline_stack scale --service triton --replicas 2
python -m inferline_stack status
python -m inferline_stack down
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferline.config import ConfigError, load
from inferline_stack import remember
from inferline_stack.config import PREFIX, StackConfig
from inferline_stack.processes import ProcessTable
from inferline_stack.replicas import scale
from inferline_stack.stack import down, up
from inferline_stack.status import status
from inferline_stack.ui import console


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inferline_stack",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Every INFERLINE_STACK_* setting is also a flag (--public-port 8080, ...).",
    )
    parser.add_argument("command", choices=["up", "down", "status", "scale"])
    parser.add_argument("--service", help="scale: which service (triton, batcher, ...)")
    parser.add_argument("--replicas", type=int, help="scale: how many replicas (1-8)")
    args, rest = parser.parse_known_args(argv)
    try:
        config = load(StackConfig, PREFIX, rest)
        if args.command in ("scale", "status"):  # the stack as started, whatever this shell sets
            config = remember.started(config, remember.explicit(rest))
        if args.command in ("up", "scale"):
            config.served_models()  # a listed model missing from the repository, by name
    except (ConfigError, ValueError) as error:
        console.print(f"[red]{error}[/]")
        return 2
    table = ProcessTable(Path(config.run_dir))
    if args.command == "scale":
        if args.service is None or args.replicas is None:
            parser.error("scale needs --service NAME --replicas N")
        return scale(config, table, args.service, args.replicas)
    commands = {"up": up, "down": down, "status": status}
    return commands[args.command](config, table)


if __name__ == "__main__":
    sys.exit(main())
