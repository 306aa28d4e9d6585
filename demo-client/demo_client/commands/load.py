"""``python -m demo_client load``: drive load at the endpoint and show images/s and latency
live (or serve them on a web page, ``--web``); a summary at the end."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from dataclasses import asdict
from pathlib import Path

from rich.console import Console

from demo_client.argtypes import positive_float, positive_int, trace_view_template
from demo_client.classify import Prediction, labelled_requests
from demo_client.client import open_clients
from demo_client.commands import common
from demo_client.commands.common import EXIT_FAILED, EXIT_OK, Command, UserError
from demo_client.load import LoadConfig, RequestFactory, image_requests, run_load
from demo_client.samples import DEFAULT_DEST, SamplesError, build_samples, image_files
from demo_client.stats import Recorder
from demo_client.timed import TimedClassifier
from demo_client.timer import TIMER_EVERY_S, Timer
from demo_client.transports import TRANSPORTS
from demo_client.view import LiveView, RunInfo, summary_table
from demo_client.web import WebView
from demo_client.web_state import WINDOW_S, WebState

DEFAULT_MODEL = "classifier"
DEFAULT_DURATION_S = 30.0
LABEL_EVERY_S = 0.5  # the web view: one request in this many seconds asks for its top class


def add_flags(parser: argparse.ArgumentParser) -> None:
    common.add_endpoint_flags(parser, model=DEFAULT_MODEL)
    common.add_request_flags(parser)
    add = parser.add_argument
    add(
        "--images",
        metavar="DIR",
        type=Path,
        default=Path(os.environ.get("INFERLINE_IMAGES") or DEFAULT_DEST),
        help="directory of JPEG/PNG files to send, built from bundled sample photos when it "
        "does not exist (env INFERLINE_IMAGES; default %(default)s)",
    )
    add(
        "--duration",
        metavar="S",
        type=positive_float,
        default=None,
        help=f"seconds to run (default {DEFAULT_DURATION_S:g}, or unbounded with --count)",
    )
    add("--count", metavar="N", type=positive_int, default=None, help="stop after N requests")
    add(
        "--concurrency",
        metavar="N",
        type=positive_int,
        default=8,
        help="requests in flight (default 8)",
    )
    add(
        "--rate",
        metavar="R",
        type=positive_float,
        default=None,
        help="open loop: Poisson arrivals at R requests/s, up to --concurrency in flight "
        "(default: a closed loop of --concurrency callers, each backing off when refused)",
    )
    add("--batch", metavar="N", type=positive_int, default=1, help="images per request (default 1)")
    add(
        "--channels",
        metavar="N",
        type=positive_int,
        default=1,
        help="gRPC channels (connections) to spread the workers over (default 1)",
    )
    web = common.add_web_flags(
        parser,
        "images/s overall and per Triton replica, latency, errors by status, recent images with "
        f"their top label, and where the time went: a timed request every {TIMER_EVERY_S:g} s "
        "beside the load, timed hop by hop and traced",
    )
    web.add_argument(
        "--trace-view",
        metavar="URL",
        type=trace_view_template,
        default="",
        help="link each timed request to its trace: a trace viewer's URL with {trace_id} where the "
        "trace's 32 hex digits go, e.g. http://127.0.0.1:5000/#/experiments/0/traces"
        "?selectedEvaluationId=tr-{trace_id} (MLflow); default: no links",
    )


def _read_images(directory: Path) -> list[tuple[str, bytes]]:
    if not directory.exists():
        print(f"building sample images in {directory}", file=sys.stderr)
        try:
            build_samples(directory)
        except SamplesError as exc:
            raise UserError(str(exc)) from exc
    if not directory.is_dir():
        raise UserError(f"--images {directory} is not a directory")
    files = image_files(directory)
    if not files:
        raise UserError(f"no image files (.jpg, .png, …) in {directory}")
    try:
        return [(f.name, f.read_bytes()) for f in files]
    except OSError as exc:
        raise UserError(f"cannot read images in {directory}: {exc}") from exc


def _dashboard(args: argparse.Namespace, info: RunInfo, names: list[str]) -> WebState:
    run = {
        **asdict(info),
        "rate": args.rate,
        "envoy_admin": args.envoy_admin or None,
        "cluster": args.envoy_cluster,
        "window_s": WINDOW_S,
    }
    return WebState(run, names, timer_every_s=TIMER_EVERY_S, trace_view=args.trace_view)


async def run(args: argparse.Namespace) -> int:
    """The load run: wait for the server, run, print the summary (and serve the web view
    meanwhile, with ``--web``)."""
    files = _read_images(args.images)
    names, images = [name for name, _ in files], [data for _, data in files]
    duration = args.duration
    if duration is None and args.count is None:
        duration = DEFAULT_DURATION_S
    config = LoadConfig(
        model=args.model,
        concurrency=args.concurrency,
        batch=args.batch,
        timeout_s=args.timeout,
        duration_s=duration,
        count=args.count,
        rate=args.rate,
    )
    info = RunInfo(args.target, config.model, config.concurrency, config.batch, args.channels,
                   config.duration_s, config.count)  # fmt: skip
    console = None if args.json else Console()
    recorder = Recorder(concurrency=args.concurrency, batch=args.batch)
    stop = asyncio.Event()
    transport = TRANSPORTS[args.protocol]
    tls = common.client_tls(args)
    requests: RequestFactory = image_requests(images, args.batch, transport)
    dashboard: WebState | None = None
    async with contextlib.AsyncExitStack() as exits:
        if args.web:
            board = dashboard = _dashboard(args, info, names)

            def label(image: int, prediction: Prediction) -> None:
                board.labelled(recorder.elapsed(), image, prediction.label, prediction.score)

            requests = labelled_requests(
                images, args.batch, label, LABEL_EVERY_S, transport=transport
            )
            web = WebView(board, recorder, images, args.envoy_admin or None, args.envoy_cluster)
            await common.serve(web, args, exits)
        clients = await exits.enter_async_context(
            open_clients(args.target, args.channels, transport, tls, args.token)
        )
        await common.wait_until_ready(clients[0], args, console, dashboard)
        if dashboard is not None:
            dashboard.running()
            timed = TimedClassifier(args.target, args.protocol, tls, args.token)
            await exits.enter_async_context(contextlib.aclosing(timed))
            timer = Timer(timed, config.model, images, args.timeout, dashboard, recorder.elapsed)
            await exits.enter_async_context(timer.running())
        with common.stop_on_signals(stop):
            if console is None:
                summary = await run_load(clients, config, requests, recorder, stop)
            else:
                done = asyncio.Event()
                view = asyncio.create_task(LiveView(recorder, info, console).run(done))
                try:
                    summary = await run_load(clients, config, requests, recorder, stop)
                finally:
                    done.set()
                    await view
        if dashboard is not None:
            dashboard.finished("finished: the demo client has stopped")
    common.print_summary(summary, info, console, summary_table)
    if summary.errors and not summary.images:
        codes = ", ".join(f"{code} x{n}" for code, n in summary.errors_by_code.items())
        common.error(f"every request to {args.target} failed ({codes}); -v shows why")
        return EXIT_FAILED
    return EXIT_OK


COMMAND = Command(
    name="load",
    help="drive load at the endpoint; images/s and latency live (--web: on a page too)",
    description="Send images to the endpoint (KServe v2, gRPC or REST) for a time or a count, "
    "closed loop or at a rate, and show images/s and latency live; a summary at the end.",
    add_flags=add_flags,
    run=run,
)
