"""``python -m fuzz``: run fuzz targets, or replay inputs through one (see :mod:`fuzz`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fuzz import runner
from fuzz.targets import TARGETS


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # What follows `--` is libFuzzer's, wherever the command's own flags are (argparse would
    # take a positional after the target as the target's, and refuse `run NAME --seconds N --`).
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(prog="python -m fuzz", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the targets and what each fuzzes")
    more = "more libFuzzer flags after --, e.g. -- -seed=1"
    one = commands.add_parser("run", help="fuzz one target for a bounded time", epilog=more)
    one.add_argument("target", choices=sorted(TARGETS))
    every = commands.add_parser(
        "all", help="fuzz every target in turn, each for --seconds", epilog=more
    )
    for sub in (one, every):
        sub.add_argument("--seconds", type=int, default=60, help="fuzzing time per target")
        sub.add_argument("--workdir", type=Path, default=runner.WORKDIR)
        sub.add_argument("--verbose", action="store_true", help="show libFuzzer's output")
    again = commands.add_parser("reproduce", help="run a target once on each input file")
    again.add_argument("target", choices=sorted(TARGETS))
    again.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if extra and args.command not in ("run", "all"):
        parser.error(f"libFuzzer flags after -- go with run or all, not {args.command}")

    if args.command == "list":
        for target in TARGETS.values():
            skipped = target.unavailable()
            print(
                f"{target.name}: {target.summary}" + (f" [skipped: {skipped}]" if skipped else "")
            )
            print(
                f"    per input: {target.timeout_s} s, {target.memory_mb} MiB of address space, "
                f"{target.max_len} bytes at most; the process under {target.rss_limit_mb} MB"
            )
        return 0
    if args.command == "reproduce":
        done = runner.reproduce(args.target, args.files)
        print(done.stdout, end="")
        return done.returncode

    names = [args.target] if args.command == "run" else list(TARGETS)
    results = []
    for name in names:
        print(f"fuzz {name}: {args.seconds} s ({TARGETS[name].summary})", flush=True)
        result = runner.run(name, args.seconds, args.workdir, extra, args.verbose)
        results.append(result)
        if not result.ok and result.log is not None and not args.verbose:
            print(tail(result.log), end="")
        for finding in result.findings:
            print(f"  finding: {finding}\n  replay: python -m fuzz reproduce {name} {finding}")
        print(result.summary(), flush=True)
    if len(results) > 1:
        print("\n".join(["", "summary:", *(r.summary() for r in results)]))
    print(runner.tally(results))
    return 1 if any(r.failed for r in results) else 0


def tail(log: Path, lines: int = 40) -> str:
    text = log.read_text(errors="replace").splitlines(keepends=True)
    return "".join(text[-lines:])


if __name__ == "__main__":
    sys.exit(main())
