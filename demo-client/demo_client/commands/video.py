"""``python -m demo_client video FILE``: stream a video in chunks over gRPC and show each
sampled frame's label as it is classified (and on a web page, ``--web``); a summary at the end."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from rich.console import Console
from tritonclient.utils import InferenceServerException

from demo_client.argtypes import positive_float, positive_int
from demo_client.client import describe, open_clients
from demo_client.commands import common
from demo_client.commands.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, Command, UserError
from demo_client.video import (
    DEFAULT_CHUNK_BYTES,
    VIDEO_MODEL,
    FrameLabel,
    Sampling,
    VideoStream,
    summarize,
)
from demo_client.video_page import VideoPage
from demo_client.video_view import VideoInfo, VideoView, video_summary_table


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("video", type=Path, metavar="FILE", help="the video (mp4, mkv, webm)")
    common.add_endpoint_flags(parser, model=VIDEO_MODEL)
    add = parser.add_argument
    add(
        "--chunk-bytes",
        metavar="N",
        type=positive_int,
        default=DEFAULT_CHUNK_BYTES,
        help="bytes per chunk (default %(default)s); the server's message limit bounds it",
    )
    add("--fps", metavar="R", type=positive_float, help="frames to classify a second")
    add("--every-n", metavar="N", type=positive_int, help="classify every Nth frame")
    add("--max-frames", metavar="N", type=positive_int, help="classify at most N frames")
    common.add_web_flags(
        parser,
        "frames/s, the upload's progress, the classified frames with their label, per Triton "
        "replica",
    )


def _cannot_read(args: argparse.Namespace, exc: OSError) -> str:
    return f"cannot read {args.video}: {exc.strerror or exc}"


async def run(args: argparse.Namespace) -> int:
    """Stream one video in chunks; print each classified frame (or one JSON object), and with
    --web show them on the page too."""
    try:
        args.video.stat()  # before waiting for the server: a typo fails at once
    except OSError as exc:
        raise UserError(_cannot_read(args, exc)) from exc
    info = VideoInfo(target=args.target, model=args.model)
    sampling = Sampling(fps=args.fps, every_n=args.every_n, max_frames=args.max_frames)
    console = None if args.json else Console()
    frames: list[FrameLabel] = []
    failure: str | None = None
    page = None
    if args.web:
        page = VideoPage(args.video, args.target, args.model, args.chunk_bytes,
                         args.envoy_admin or None, args.envoy_cluster)  # fmt: skip
    async with contextlib.AsyncExitStack() as exits:
        if page is not None:
            await common.serve(page.web, args, exits)
        tls = common.client_tls(args)
        clients = await exits.enter_async_context(
            open_clients(args.target, tls=tls, token=args.token)
        )
        board = None if page is None else page.board
        await common.wait_until_ready(clients[0], args, console, board)
        try:
            stream = VideoStream(clients[0], args.video, args.chunk_bytes, sampling, args.model)
        except OSError as exc:
            raise UserError(_cannot_read(args, exc)) from exc
        view = None if console is None else VideoView(stream, info, console)
        done = asyncio.Event()
        shown = asyncio.create_task(view.run(done)) if view is not None else None
        stop = asyncio.Event()
        if page is not None:
            page.started(stream)
        try:
            with common.stop_on_signals(stop):
                await _unless_stopped(_receive(stream, frames, view, page), stop)
        except InferenceServerException as exc:
            failure = f"{args.video}: {describe(exc)}"
        except OSError as exc:
            failure = _cannot_read(args, exc)
        finally:
            done.set()
            if shown is not None:
                await shown
            if page is not None:
                page.finished(failure)
    summary = summarize(stream, frames)
    common.print_summary(summary, info, console, video_summary_table)
    if failure is not None:
        common.error(failure)
        return EXIT_FAILED
    return EXIT_OK if summary.complete else EXIT_INTERRUPTED


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


COMMAND = Command(
    name="video",
    help="stream a video FILE in chunks; each sampled frame's label live (--web: on a page too)",
    description="Stream FILE (mp4, mkv, webm) in chunks to the endpoint over gRPC "
    "(ModelStreamInfer; REST has no streaming) and show each sampled frame's label as it is "
    "classified, the upload's progress and frames/s; a summary at the end.",
    add_flags=add_flags,
    run=run,
)
