"""What the commands share: the endpoint's flags and the web view's, user errors and exit
codes, waiting for the server, stopping on Ctrl-C, serving the page, printing the summary."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from rich.console import Console, RenderableType

from demo_client.argtypes import non_negative_float, port, positive_float
from demo_client.client import wait_ready
from demo_client.envoy_hosts import DEFAULT_ADMIN, DEFAULT_CLUSTER
from demo_client.transports import TRANSPORTS, ClientTls
from demo_client.web import WebView
from demo_client.web_state import WebState

EXIT_OK = 0
EXIT_FAILED = 1  # every request failed, a file could not be classified, no images, a video refused
EXIT_USAGE = 2  # argparse's own
EXIT_NOT_READY = 3  # the server never answered, or never became ready
EXIT_INTERRUPTED = 130

DEFAULT_TARGET = "localhost:8080"
DEFAULT_WEB_HOST = "127.0.0.1"
DEFAULT_WEB_PORT = 8088


class UserError(Exception):
    """A problem the user can fix; printed without a traceback."""


@dataclass(frozen=True)
class Command:
    """One subcommand: its name, its one-line help, its flags and what it runs."""

    name: str
    help: str
    description: str
    add_flags: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], Awaitable[int]]


def error(message: str) -> None:
    print(f"demo_client: error: {message}", file=sys.stderr)


def add_endpoint_flags(parser: argparse.ArgumentParser, *, model: str) -> None:
    """Where to connect and how (every command): target, model, TLS, readiness, output."""
    add = parser.add_argument
    add(
        "--target",
        metavar="HOST:PORT",
        default=os.environ.get("INFERLINE_TARGET", DEFAULT_TARGET),
        help="host:port of the endpoint (env INFERLINE_TARGET; default %(default)s)",
    )
    add("--model", metavar="NAME", default=model, help="model name (default %(default)s)")
    add(
        "--tls",
        action="store_true",
        help="TLS to the endpoint, trusting the system's CAs (or --ca); plaintext without it",
    )
    add(
        "--ca",
        metavar="FILE",
        type=Path,
        default=None,
        help="TLS, trusting the CA certificates (PEM) in FILE, e.g. .run/certs/ca.crt of "
        "`make certs` (implies --tls)",
    )
    add(
        "--cert",
        metavar="FILE",
        type=Path,
        default=None,
        help="mutual TLS: present this client certificate (PEM; with --key; implies --tls)",
    )
    add("--key", metavar="FILE", type=Path, default=None, help="the key of --cert (PEM)")
    add(
        "--token",
        metavar="JWT",
        default=os.environ.get("INFERLINE_TOKEN") or None,
        help="a bearer token, for an endpoint that requires one (a stack with "
        "INFERLINE_STACK_AUTH=true: `make token` writes .run/auth/token; env INFERLINE_TOKEN)",
    )
    add(
        "--wait",
        metavar="S",
        type=non_negative_float,
        default=60.0,
        help="seconds to wait for the server and model to be ready (default 60)",
    )
    add("--json", action="store_true", help="no live view; print one JSON object at the end")
    add("-v", "--verbose", action="store_true", help="debug logging on stderr")


def add_request_flags(parser: argparse.ArgumentParser) -> None:
    """The protocol and the timeout of single requests (``load`` and ``classify``)."""
    parser.add_argument(
        "--protocol",
        choices=sorted(TRANSPORTS),
        default="grpc",
        help="KServe v2 over gRPC or HTTP/REST (binary tensors); the public endpoint speaks both "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--timeout",
        metavar="S",
        type=positive_float,
        default=10.0,
        help="seconds per request (default 10)",
    )


def add_web_flags(parser: argparse.ArgumentParser, shows: str) -> argparse._ArgumentGroup:
    """``--web`` and where the page listens (``load`` and ``video``); ``shows``: what it shows.
    Returns the group, for a command's own web view flags."""
    web = parser.add_argument_group("web view", f"--web serves a live page beside the run: {shows}")
    web.add_argument("--web", action="store_true", help="serve the live web view during the run")
    web.add_argument(
        "--web-host",
        metavar="HOST",
        default=DEFAULT_WEB_HOST,
        help="address the page listens on (default %(default)s)",
    )
    web.add_argument(
        "--web-port",
        metavar="PORT",
        type=port,
        default=DEFAULT_WEB_PORT,
        help="port of the page, 0 for any free one (default %(default)s)",
    )
    web.add_argument(
        "--envoy-admin",
        metavar="URL",
        default=os.environ.get("INFERLINE_ENVOY_ADMIN", DEFAULT_ADMIN),
        help="Envoy's admin, for the per-replica lines; '' for none "
        "(env INFERLINE_ENVOY_ADMIN; default %(default)s)",
    )
    web.add_argument(
        "--envoy-cluster",
        metavar="NAME",
        default=DEFAULT_CLUSTER,
        help="the Envoy cluster whose endpoints get a line each (default %(default)s)",
    )
    return web


def client_tls(args: argparse.Namespace) -> ClientTls | None:
    """What --tls, --ca, --cert and --key ask for; None: plaintext. A file that cannot be
    read is a UserError naming the flag."""
    if bool(args.cert) != bool(args.key):
        raise UserError("--cert and --key go together (a client certificate and its key)")
    if not (args.tls or args.ca or args.cert):
        return None
    for flag, path in (("--ca", args.ca), ("--cert", args.cert), ("--key", args.key)):
        if path is not None and not os.access(path, os.R_OK):
            raise UserError(f"{flag} {path}: cannot read it (make certs writes .run/certs/)")

    def text(path: Path | None) -> str | None:
        return None if path is None else str(path)

    return ClientTls(text(args.ca), text(args.cert), text(args.key))


async def wait_until_ready(
    client: object,
    args: argparse.Namespace,
    console: Console | None,
    dashboard: WebState | None = None,
) -> None:
    """Wait for the server and ``--model``, saying so on the terminal and on the page."""
    waiting = f"waiting for {args.target} (model {args.model}) to be ready"
    if dashboard is not None:
        dashboard.waiting(waiting)
    if console is None:
        await wait_ready(client, args.target, args.model, args.wait)
        return
    with console.status(f"{waiting}…"):
        await wait_ready(client, args.target, args.model, args.wait)


@contextlib.contextmanager
def stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
    """Ctrl-C and SIGTERM end the run gracefully (the summary is still printed)."""
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM)
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    try:
        yield
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


async def serve(web: WebView, args: argparse.Namespace, exits: contextlib.AsyncExitStack) -> None:
    """Start the web view (it stops with ``exits``); say where."""
    try:
        url = await exits.enter_async_context(web.serving(args.web_host, args.web_port))
    except OSError as exc:
        raise UserError(
            f"cannot serve the web view on {args.web_host}:{args.web_port}: {exc.strerror or exc}"
            " (--web-port 0 takes any free port)"
        ) from exc
    print(f"web view: {url}", file=sys.stderr, flush=True)


class _Summary(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


class _Info(Protocol):
    @property
    def target(self) -> str: ...

    @property
    def model(self) -> str: ...


SummaryT = TypeVar("SummaryT", bound=_Summary)
InfoT = TypeVar("InfoT", bound=_Info)


def print_summary(
    summary: SummaryT,
    info: InfoT,
    console: Console | None,
    table: Callable[[SummaryT, InfoT], RenderableType],
) -> None:
    """The run's summary: one JSON object (with the target and model) without a console, else
    ``table`` on it."""
    if console is None:
        print(json.dumps({**summary.to_dict(), "target": info.target, "model": info.model}))
    else:
        console.print(table(summary, info))
