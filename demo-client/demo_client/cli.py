"""``python -m demo_client COMMAND``: ``load`` drives load at the public endpoint and shows
images/s, ``classify`` prints the top classes of a few files, ``video`` streams a video in chunks
and shows each sampled frame's label. Each command takes only its own flags
(``python -m demo_client COMMAND --help``)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence

from demo_client.client import NotReadyError
from demo_client.commands import classify, load, video
from demo_client.commands.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_READY,
    UserError,
    error,
)

PROG = "python -m demo_client"
COMMANDS = (load.COMMAND, classify.COMMAND, video.COMMAND)
HELP = ("-h", "--help")


def _parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The command line, and each command's own parser by its name."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Send images to inferline's public endpoint (KServe v2) and show images/s "
        "and latency live (load); classify a few files (classify); or stream a video in chunks "
        "and show each sampled frame's label (video).",
        epilog=f"`{PROG} COMMAND --help` lists the flags of that command.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    parsers = {}
    for command in COMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.description)
        command.add_flags(sub)
        sub.set_defaults(run=command.run)
        parsers[command.name] = sub
    return parser, parsers


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    return _parsers()[0]


def _flag(word: str) -> str:
    return word.split("=", 1)[0]


def _not_its_flags(
    command: str, extra: list[str], parsers: dict[str, argparse.ArgumentParser]
) -> str:
    """Why ``extra`` is refused: which other commands take its first flag, if any do."""
    message = f"unrecognized arguments: {' '.join(extra)}"
    flag = next((_flag(word) for word in extra if word.startswith("-")), None)
    owners = [
        name
        for name, other in parsers.items()
        if name != command and flag in other._option_string_actions  # argparse keeps no public map
    ]
    if owners:
        message += f" ({flag} is a flag of {' and '.join(owners)}, not of {command})"
    return f"{message}; `{PROG} {command} --help` lists its flags"


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The arguments, or exit 2 with a usage error: a missing command, a bad value, or a flag
    the command does not take (naming the command that does)."""
    words = list(sys.argv[1:] if argv is None else argv)
    parser, parsers = _parsers()
    if not words or (words[0].startswith("-") and words[0] not in HELP):
        parser.error(
            f"a command comes first: {', '.join(parsers)}; e.g. `{PROG} load --duration 30` "
            f"(`--classify FILE` is now `classify FILE`, `--video FILE` is now `video FILE`)"
        )
    args, extra = parser.parse_known_args(words)
    if extra:
        parsers[args.command].error(_not_its_flags(args.command, extra, parsers))
    return args


async def amain(args: argparse.Namespace) -> int:
    """Run the command that ``args`` asks for; map user errors to exit codes."""
    try:
        code: int = await args.run(args)
    except NotReadyError as exc:
        error(str(exc))
        return EXIT_NOT_READY
    except UserError as exc:
        error(str(exc))
        return EXIT_FAILED
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = parse(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return asyncio.run(amain(args))
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_INTERRUPTED
