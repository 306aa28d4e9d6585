"""``python -m demo_client``: drive load at the public endpoint and show images/s; classify a
few files; or stream a video in chunks and show each sampled frame's label (``--video``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from tritonclient.utils import InferenceServerException

from demo_client.classify import Prediction, classify, format_prediction, labelled_requests
from demo_client.client import NotReadyError, describe, open_clients, wait_ready
from demo_client.dashboard import WINDOW_S, Dashboard, Frame
from demo_client.envoy_hosts import DEFAULT_ADMIN, DEFAULT_CLUSTER
from demo_client.load import LoadConfig, RequestFactory, image_requests, run_load
from demo_client.samples import DEFAULT_DEST, SamplesError, build_samples, image_files
from demo_client.stats import Recorder, Summary
from demo_client.transports import TRANSPORTS, ClientTls
from demo_client.video import (
    DEFAULT_CHUNK_BYTES,
    VIDEO_MODEL,
    FrameLabel,
    Sampling,
    VideoStream,
    summarize,
)
from demo_client.video_view import VideoInfo, VideoView, video_summary_table
from demo_client.view import LiveView, RunInfo, summary_table
from demo_client.web import WebView

logger = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_FAILED = 1  # every request failed, a file could not be classified, no images, a video refused
EXIT_USAGE = 2  # argparse's own
EXIT_NOT_READY = 3  # the server never answered, or never became ready
EXIT_INTERRUPTED = 130

DEFAULT_TARGET = "localhost:8080"
DEFAULT_DURATION_S = 30.0
DEFAULT_WEB_HOST = "127.0.0.1"
DEFAULT_WEB_PORT = 8088
LABEL_EVERY_S = 0.5  # the web view: one request in this many seconds asks for its top class


class UserError(Exception):
    """A problem the user can fix; printed without a traceback."""


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {text}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"must be a TCP port (0: any free one), not {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m demo_client",
        description="Send images to inferline's public endpoint (KServe v2 gRPC) and show "
        "images/s and latency live; or classify a few files; or stream a video in chunks and "
        "show each sampled frame's label.",
    )
    add = parser.add_argument
    add(
        "--target",
        metavar="HOST:PORT",
        default=os.environ.get("INFERLINE_TARGET", DEFAULT_TARGET),
        help="host:port of the endpoint (env INFERLINE_TARGET; default %(default)s)",
    )
    add(
        "--model",
        metavar="NAME",
        default=None,
        help=f"model name (default classifier, or {VIDEO_MODEL} with --video)",
    )
    add(
        "--protocol",
        choices=sorted(TRANSPORTS),
        default="grpc",
        help="KServe v2 over gRPC or HTTP/REST (binary tensors); the public endpoint speaks both "
        "(default %(default)s)",
    )
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
        "--images",
        metavar="DIR",
        type=Path,
        default=DEFAULT_DEST,
        help="directory of JPEG/PNG files to send, built from bundled sample photos when it "
        "does not exist (default %(default)s)",
    )
    add(
        "--duration",
        metavar="S",
        type=_positive_float,
        default=None,
        help=f"seconds to run (default {DEFAULT_DURATION_S:g}, or unbounded with --count)",
    )
    add(
        "--count",
        metavar="N",
        type=_positive_int,
        default=None,
        help="stop after this many requests",
    )
    add(
        "--concurrency",
        metavar="N",
        type=_positive_int,
        default=8,
        help="requests in flight (default 8)",
    )
    add(
        "--rate",
        metavar="R",
        type=_positive_float,
        default=None,
        help="open loop: Poisson arrivals at R requests/s, up to --concurrency in flight "
        "(default: a closed loop of --concurrency callers, each backing off when refused)",
    )
    add(
        "--batch", metavar="N", type=_positive_int, default=1, help="images per request (default 1)"
    )
    add(
        "--channels",
        metavar="N",
        type=_positive_int,
        default=1,
        help="gRPC channels (connections) to spread the workers over (default 1)",
    )
    add(
        "--timeout",
        metavar="S",
        type=_positive_float,
        default=10.0,
        help="seconds per request (default 10)",
    )
    add(
        "--wait",
        metavar="S",
        type=_non_negative_float,
        default=60.0,
        help="seconds to wait for the server and model to be ready (default 60)",
    )
    add("--json", action="store_true", help="no live view; print one JSON object at the end")
    add(
        "--classify",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="instead of load, print the top classes of each FILE",
    )
    add(
        "--top-k",
        metavar="K",
        type=_positive_int,
        default=5,
        help="classes per file for --classify (default 5)",
    )
    web = parser.add_argument_group(
        "web view",
        "--web serves a live page beside the load: images/s overall and per Triton replica, "
        "latency, errors by status, recent images with their top label",
    )
    web.add_argument(
        "--web", action="store_true", help="serve the live web view while the load runs"
    )
    web.add_argument(
        "--web-host",
        metavar="HOST",
        default=DEFAULT_WEB_HOST,
        help="address the page listens on (default %(default)s)",
    )
    web.add_argument(
        "--web-port",
        metavar="PORT",
        type=_port,
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
    add(
        "--video",
        type=Path,
        metavar="FILE",
        help="instead of load, stream FILE (mp4, mkv, webm) in chunks and show each sampled "
        "frame's label as it is classified, the upload's progress and frames/s",
    )
    add(
        "--chunk-bytes",
        metavar="N",
        type=_positive_int,
        default=DEFAULT_CHUNK_BYTES,
        help="bytes per chunk for --video (default %(default)s); the server's message limit "
        "bounds it",
    )
    add("--fps", metavar="R", type=_positive_float, help="--video: frames to classify a second")
    add("--every-n", metavar="N", type=_positive_int, help="--video: classify every Nth frame")
    add("--max-frames", metavar="N", type=_positive_int, help="--video: classify at most N")
    add("-v", "--verbose", action="store_true", help="debug logging on stderr")
    return parser


def _error(message: str) -> None:
    print(f"demo_client: error: {message}", file=sys.stderr)


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


@contextlib.contextmanager
def _stop_on_signals(stop: asyncio.Event) -> Iterator[None]:
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


async def _wait_ready(
    client: object,
    args: argparse.Namespace,
    console: Console | None,
    dashboard: Dashboard | None = None,
) -> None:
    if dashboard is not None:
        dashboard.waiting(f"waiting for {args.target} (model {args.model}) to be ready")
    if console is None:
        await wait_ready(client, args.target, args.model, args.wait)
        return
    with console.status(f"waiting for {args.target} (model {args.model}) to be ready…"):
        await wait_ready(client, args.target, args.model, args.wait)


def _print_summary(summary: Summary, info: RunInfo, console: Console | None) -> None:
    if console is None:
        print(json.dumps({**summary.to_dict(), "target": info.target, "model": info.model}))
    else:
        console.print(summary_table(summary, info))


def _dashboard(args: argparse.Namespace, info: RunInfo, names: list[str]) -> Dashboard:
    run = {
        **asdict(info),
        "rate": args.rate,
        "envoy_admin": args.envoy_admin or None,
        "cluster": args.envoy_cluster,
        "window_s": WINDOW_S,
    }
    return Dashboard(run, names)


async def _serve(web: WebView, args: argparse.Namespace, exits: contextlib.AsyncExitStack) -> None:
    """Start the web view; say where."""
    try:
        url = await exits.enter_async_context(web.serving(args.web_host, args.web_port))
    except OSError as exc:
        raise UserError(
            f"cannot serve the web view on {args.web_host}:{args.web_port}: {exc.strerror or exc}"
            " (--web-port 0 takes any free port)"
        ) from exc
    print(f"web view: {url}", file=sys.stderr, flush=True)


async def load_command(args: argparse.Namespace) -> int:
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
    info = RunInfo(
        target=args.target,
        model=args.model,
        concurrency=args.concurrency,
        batch=args.batch,
        channels=args.channels,
        duration_s=duration,
        count=args.count,
    )
    console = None if args.json else Console()
    recorder = Recorder(concurrency=args.concurrency, batch=args.batch)
    stop = asyncio.Event()
    transport = TRANSPORTS[args.protocol]
    requests: RequestFactory = image_requests(images, args.batch, transport)
    dashboard: Dashboard | None = None
    async with contextlib.AsyncExitStack() as exits:
        if args.web:
            board = dashboard = _dashboard(args, info, names)

            def label(image: int, prediction: Prediction) -> None:
                board.labelled(recorder.elapsed(), image, prediction.label, prediction.score)

            requests = labelled_requests(
                images, args.batch, label, LABEL_EVERY_S, transport=transport
            )
            web = WebView(board, recorder, images, args.envoy_admin or None, args.envoy_cluster)
            await _serve(web, args, exits)
        clients = await exits.enter_async_context(
            open_clients(args.target, args.channels, transport, client_tls(args))
        )
        await _wait_ready(clients[0], args, console, dashboard)
        if dashboard is not None:
            dashboard.running()
        with _stop_on_signals(stop):
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
    _print_summary(summary, info, console)
    if summary.errors and not summary.images:
        codes = ", ".join(f"{code} x{n}" for code, n in summary.errors_by_code.items())
        _error(f"every request to {args.target} failed ({codes}); -v shows why")
        return EXIT_FAILED
    return EXIT_OK


async def classify_command(args: argparse.Namespace) -> int:
    """Print the top-k classes of each file (or one JSON object with all of them)."""
    failed = 0
    results: dict[str, object] = {}
    transport = TRANSPORTS[args.protocol]
    async with open_clients(args.target, transport=transport, tls=client_tls(args)) as clients:
        await _wait_ready(clients[0], args, None)
        for path in args.classify:
            try:
                predictions = await classify(
                    clients[0], args.model, path.read_bytes(), args.top_k, args.timeout, transport
                )
            except OSError as exc:
                _error(f"cannot read {path}: {exc.strerror or exc}")
                failed += 1
                continue
            except InferenceServerException as exc:
                _error(f"{path}: {describe(exc)}")
                failed += 1
                continue
            except ValueError as exc:
                _error(f"{path}: {exc}")
                failed += 1
                continue
            if args.json:
                results[str(path)] = [asdict(p) for p in predictions]
            else:
                print(path)
                for p in predictions:
                    print(f"  {format_prediction(p)}")
    if args.json:
        print(json.dumps(results))
    return EXIT_FAILED if failed else EXIT_OK


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


async def video_command(args: argparse.Namespace) -> int:
    """Stream one video in chunks; print each classified frame (or one JSON object), and with
    --web show them on the page too."""
    if args.protocol != "grpc":
        raise UserError("--video streams over gRPC (ModelStreamInfer): REST has no streaming")
    try:
        args.video.stat()  # before waiting for the server: a typo fails at once
    except OSError as exc:
        raise UserError(f"cannot read --video {args.video}: {exc.strerror or exc}") from exc
    info = VideoInfo(target=args.target, model=args.model)
    sampling = Sampling(fps=args.fps, every_n=args.every_n, max_frames=args.max_frames)
    console = None if args.json else Console()
    frames: list[FrameLabel] = []
    failure: str | None = None
    page = VideoPage(args) if args.web else None
    async with contextlib.AsyncExitStack() as exits:
        if page is not None:
            await _serve(page.web, args, exits)
        clients = await exits.enter_async_context(open_clients(args.target, tls=client_tls(args)))
        await _wait_ready(clients[0], args, console, None if page is None else page.board)
        try:
            stream = VideoStream(clients[0], args.video, args.chunk_bytes, sampling, args.model)
        except OSError as exc:
            raise UserError(f"cannot read --video {args.video}: {exc.strerror or exc}") from exc
        view = None if console is None else VideoView(stream, info, console)
        done = asyncio.Event()
        shown = asyncio.create_task(view.run(done)) if view is not None else None
        stop = asyncio.Event()
        if page is not None:
            page.started(stream)
        try:
            with _stop_on_signals(stop):
                await _unless_stopped(_receive(stream, frames, view, page), stop)
        except InferenceServerException as exc:
            failure = f"{args.video}: {describe(exc)}"
        except OSError as exc:
            failure = f"cannot read --video {args.video}: {exc.strerror or exc}"
        finally:
            done.set()
            if shown is not None:
                await shown
            if page is not None:
                page.finished(failure)
    summary = summarize(stream, frames)
    if console is None:
        print(json.dumps({**summary.to_dict(), "target": info.target, "model": info.model}))
    else:
        console.print(video_summary_table(summary, info))
    if failure is not None:
        _error(failure)
        return EXIT_FAILED
    return EXIT_OK if summary.complete else EXIT_INTERRUPTED


class VideoPage:
    """The web view of a video run: each classified frame is an item done (the chart shows
    frames/s; "latency" is the time between answers), with the upload's progress."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.file = args.video.name
        self.recorder = Recorder(concurrency=1, batch=1)
        run = {
            "target": args.target,
            "model": args.model,
            "video": self.file,
            "chunk_bytes": args.chunk_bytes,
            "window_s": WINDOW_S,
            "envoy_admin": args.envoy_admin or None,
            "cluster": args.envoy_cluster,
        }
        self.board = Dashboard(run, [])
        self.web = WebView(self.board, self.recorder, [], args.envoy_admin or None,
                           args.envoy_cluster)  # fmt: skip
        self.answered = 0.0  # elapsed_s of the last answer

    def started(self, stream: VideoStream) -> None:
        self.recorder.start()
        self.board.video(self.file, 0, stream.total_bytes)
        self.board.running()

    def frame(self, frame: FrameLabel) -> None:
        self.recorder.record_ok(frame.elapsed_s - self.answered, 1)
        self.answered = frame.elapsed_s
        self.board.video(self.file, frame.bytes_sent, frame.total_bytes)
        self.board.framed(
            Frame(frame.index, frame.timestamp_s, frame.label, frame.score, frame.elapsed_s)
        )

    def finished(self, failure: str | None) -> None:
        self.recorder.stop()
        if failure is not None:
            self.recorder.record_error("FAILED")
        self.board.finished(failure or "finished: the video is classified")


async def _unless_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> None:
    """Run ``work`` to its end, or until ``stop`` is set (Ctrl-C): then cancel it."""
    task = asyncio.create_task(work)
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if not task.cancelled():
        task.result()


async def _receive(
    stream: VideoStream,
    frames: list[FrameLabel],
    view: VideoView | None,
    page: VideoPage | None = None,
) -> None:
    async for frame in stream:
        frames.append(frame)
        if view is not None:
            view.add(frame)
        if page is not None:
            page.frame(frame)


async def amain(args: argparse.Namespace) -> int:
    """Run the command that ``args`` asks for; map user errors to exit codes."""
    if args.model is None:
        args.model = VIDEO_MODEL if args.video else "classifier"
    try:
        if args.video:
            if args.classify:
                raise UserError("--video and --classify are two different runs: give one")
            return await video_command(args)
        if args.classify:
            if args.web:
                raise UserError("--web shows a load run; it does not go with --classify")
            return await classify_command(args)
        return await load_command(args)
    except NotReadyError as exc:
        _error(str(exc))
        return EXIT_NOT_READY
    except UserError as exc:
        _error(str(exc))
        return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return asyncio.run(amain(args))
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
