"""``python -m demo_client classify FILE...``: print the top classes of each file and where its
answer's time went, hop by hop (or one JSON object with the classes of all of them)."""

from __future__ import annotations

import argparse
import contextlib
import json
from dataclasses import asdict
from pathlib import Path

from tritonclient.utils import InferenceServerException

from demo_client.argtypes import positive_int
from demo_client.classify import format_prediction
from demo_client.client import describe, open_clients
from demo_client.commands.common import (
    EXIT_FAILED,
    EXIT_OK,
    Command,
    add_endpoint_flags,
    add_request_flags,
    client_tls,
    error,
    wait_until_ready,
)
from demo_client.timed import TimedClassifier, format_timing
from demo_client.transports import TRANSPORTS

DEFAULT_MODEL = "classifier"


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="images to classify")
    add_endpoint_flags(parser, model=DEFAULT_MODEL)
    add_request_flags(parser)
    parser.add_argument(
        "--top-k",
        metavar="K",
        type=positive_int,
        default=5,
        help="classes per file (default 5)",
    )


async def run(args: argparse.Namespace) -> int:
    """Print the top-k classes of each file and its answer's per-hop timing (or one JSON object
    with the classes of all of them); a file that cannot be read or classified is named on
    stderr and fails the run, not the others."""
    failed = 0
    results: dict[str, object] = {}
    transport, tls = TRANSPORTS[args.protocol], client_tls(args)
    timed = TimedClassifier(args.target, args.protocol, tls, args.token)
    async with (
        open_clients(args.target, transport=transport, tls=tls, token=args.token) as clients,
        contextlib.aclosing(timed),
    ):
        await wait_until_ready(clients[0], args, None)
        for path in args.files:
            try:
                answer = await timed.classify(
                    args.model, path.read_bytes(), args.top_k, args.timeout
                )
            except OSError as exc:
                error(f"cannot read {path}: {exc.strerror or exc}")
                failed += 1
                continue
            except InferenceServerException as exc:
                error(f"{path}: {describe(exc)}")
                failed += 1
                continue
            except ValueError as exc:
                error(f"{path}: {exc}")
                failed += 1
                continue
            if args.json:
                results[str(path)] = [asdict(p) for p in answer.predictions]
            else:
                print(path)
                for p in answer.predictions:
                    print(f"  {format_prediction(p)}")
                if answer.timing:  # what the answer said of where its time went
                    print(f"  time: {format_timing(answer.timing)}")
    if args.json:
        print(json.dumps(results))
    return EXIT_FAILED if failed else EXIT_OK


COMMAND = Command(
    name="classify",
    help="print the top classes of each FILE",
    description="Classify each FILE once and print its top classes (with --json: one object, "
    "the file's path to its classes).",
    add_flags=add_flags,
    run=run,
)
