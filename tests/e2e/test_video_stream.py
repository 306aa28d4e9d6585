"""classifier_video in chunks end to end: a video streams in chunks through every placement and
each sampled frame is classified by the real model while the upload is still going on (the
client holds its last chunk back until a result has arrived); a video many times larger than a
message streams through middlemen and a preprocess service started with a small message limit,
and their peak memory grows by far less than the video; the demo client streams a video and
prints each frame's label."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tritonclient.grpc.aio as triton

from inferline_stack.config import StackConfig
from inferline_stack.health import wait_ready
from inferline_stack.processes import ProcessTable
from inferline_testing import chunks as chunks_
from inferline_testing import media, tools
from inferline_testing.chunks import finals, frame_indices
from inferline_testing.ports import free_port
from inferline_testing.procfs import process_usage

pytestmark = pytest.mark.e2e

MODEL = "classifier_video"
MiB = 1024 * 1024
START_TIMEOUT_S = 120.0
# The dedicated pipeline: one message is at most this; the video is many of them.
MESSAGE_BYTES = 1 * MiB
CHUNK_BYTES = 512 * 1024
LARGE_VIDEO_BYTES = 160 * MiB
# What a video in chunks may add to a process's peak memory, beyond what a short one of the
# same kind took: chunks in flight (gRPC's flow-control windows, fixed at 4 MiB a stream, the
# forwarding's two), decoded frames, allocator slack; none of it grows with the video. Measured
# on the 2-core development machine, shared with other work (11-42 MiB; 17-25 MiB with Triton
# paused 1.5 s mid-upload, where gRPC's growing windows had let 26-70 MiB in): see docs/video.md.
# A whole video in memory would add the video itself, several times over (message,
# input array, copies): twice this bound and more.
PEAK_GROWTH_BOUND = 80 * MiB


def cat_classes(result: triton.InferResult) -> set[int]:
    top = result.as_numpy("PROBABILITIES")[0]
    return {int(entry.split(b":")[1]) for entry in top} & set(media.CAT_CLASSES)


@functools.cache
def ten_seconds() -> bytes:
    """The panning cat for 10 s (VP9 in webm, written by OpenCV): FFmpeg reads up to 5 s of a
    video before its first frame, so a shorter one could not show results before its end."""
    return media.make_video("vp9_webm", media.video_frames(100))


async def test_a_video_in_chunks_is_classified_while_it_arrives(public_url: str) -> None:
    data = ten_seconds()
    requests = chunks_.chunks(MODEL, data, 16 * 1024, fps=1.0)
    assert len(requests) > 10
    async with triton.InferenceServerClient(public_url) as client:
        results = await chunks_.send(client, requests, hold_last_until_a_result=True)
    assert frame_indices(results) == list(range(0, 100, 10))
    assert finals(results) == [False] * 9 + [True]
    for result in results:
        assert cat_classes(result), result.as_numpy("PROBABILITIES")


@dataclass
class Placement:
    url: str
    processes: dict[str, int]  # the processes that carry a video through it: name -> pid


@pytest.fixture(scope="module")
def small_messages(
    stack: StackConfig, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Placement]]:
    """Two middlemen and a preprocess service whose messages are at most 1 MiB, on the session's
    Triton: ``remote-decode`` (middleman → preprocess) and ``in-process-decode``."""
    table = ProcessTable(tmp_path_factory.mktemp("small-messages"))
    ports = {name: free_port() for name in ("preprocess", "remote-decode", "in-process-decode")}
    preprocess = f"127.0.0.1:{ports['preprocess']}"
    limits = {
        "MAX_MESSAGE_BYTES": str(MESSAGE_BYTES),
        "MAX_VIDEO_BYTES": str(MESSAGE_BYTES - 1),
        "MAX_IMAGE_BYTES": str(MESSAGE_BYTES - 1),
        "VIDEO_CHUNK_FRAMES": "4",  # 4 frames of 3x224x224: a response within the limit
    }
    envs = {
        "preprocess": _env("preprocess", ports["preprocess"], WORKERS="2", **limits),
        **{
            name: _env(
                "middleman",
                ports[name],
                TRITON_URL=f"127.0.0.1:{stack.triton_grpc_port}",
                TRITON_MODEL=stack.model,
                REPOSITORY=stack.model_repository,
                PREPROCESS_URL=preprocess if name == "remote-decode" else "",
                **limits,
            )
            for name in ("remote-decode", "in-process-decode")
        },
    }
    try:
        for name, env in envs.items():
            module = "preprocess" if name == "preprocess" else "middleman"
            table.start(name, [sys.executable, "-m", module], env)
        for name in envs:
            model = "preprocess" if name == "preprocess" else "classifier"
            running = functools.partial(table.running, name)
            address = f"127.0.0.1:{ports[name]}"
            if not wait_ready(address, model, START_TIMEOUT_S, running):
                pytest.fail(f"{name} did not become ready:\n{table.log_tail(name)}")
        pids = {name: table.pid(name) for name in envs}
        assert all(pids.values()), pids
        yield {
            "remote-decode": Placement(
                f"127.0.0.1:{ports['remote-decode']}",
                {"middleman": pids["remote-decode"] or 0, "preprocess": pids["preprocess"] or 0},
            ),
            "in-process-decode": Placement(
                f"127.0.0.1:{ports['in-process-decode']}",
                {"middleman": pids["in-process-decode"] or 0},
            ),
        }
    finally:
        table.stop_all(list(envs), 10)


def _env(service: str, port: int, **settings: str) -> dict[str, str]:
    prefix = f"INFERLINE_{service.upper()}"
    values = {"HOST": "127.0.0.1", "PORT": str(port), "METRICS_PORT": str(free_port()), **settings}
    if service == "middleman":  # its REST port too, a free one: never the default's
        values["REST_PORT"] = str(free_port())
    return {f"{prefix}_{name}": value for name, value in values.items()}


@functools.cache
def large_video(min_bytes: int = LARGE_VIDEO_BYTES, fps: float = 10.0) -> bytes:
    """The cat at 1280x720, lossless H.264 with noise at its sides (mp4, its index first):
    160 MiB of it is made in about 4 s, and decoded in about 2."""
    with tools.missing_on(LookupError):
        return media.large_video(min_bytes, "mp4", 1280, 720, fps, min_seconds=10.0)


def peaks(placement: Placement) -> dict[str, int]:
    return {name: process_usage(pid).peak_rss_bytes for name, pid in placement.processes.items()}


@pytest.mark.parametrize("placement", ["remote-decode", "in-process-decode"])
async def test_a_video_many_messages_long_streams_with_bounded_memory(
    small_messages: dict[str, Placement], placement: str
) -> None:
    target = small_messages[placement]
    data = large_video()
    assert len(data) >= 2 * PEAK_GROWTH_BOUND and len(data) >= 40 * MESSAGE_BYTES
    async with triton.InferenceServerClient(target.url) as client:
        # Warm up with a short video of the same kind: what the first one costs once (codec,
        # threads, buffers of these sizes) is not what a longer one adds.
        short = large_video(0, fps=1.0)  # 10 frames
        warm = chunks_.chunks(MODEL, short, CHUNK_BYTES, video_bytes=len(short), fps=1.0)
        await chunks_.send(client, warm)
        before = peaks(target)
        requests = chunks_.chunks(MODEL, data, CHUNK_BYTES, video_bytes=len(data), fps=1.0)
        timings: dict[str, float] = {}
        results = await chunks_.send(
            client, requests, hold_last_until_a_result=True, timings=timings
        )
    after = peaks(target)
    frames = len(results)
    assert frame_indices(results) == list(range(0, 10 * frames, 10)) and frames >= 10
    assert finals(results) == [False] * (frames - 1) + [True]
    for result in results:
        assert cat_classes(result), result.as_numpy("PROBABILITIES")
    growth = {name: after[name] - before[name] for name in after}
    print(  # figures for the record, not asserted
        f"\n{placement}: {len(data) / MiB:.1f} MiB in {len(requests)} chunks; first result "
        f"after {timings['first_result_s']:.2f} s, all but the last chunk sent after "
        f"{timings['held_back_s']:.2f} s, {frames} frames in {timings['done_s']:.2f} s; peak "
        "memory "
        + ", ".join(f"{n} {after[n] / MiB:.0f} MiB (+{g / MiB:.1f})" for n, g in growth.items())
    )
    for name, grown in growth.items():
        assert grown < PEAK_GROWTH_BOUND, f"{name}'s peak memory grew {grown / MiB:.1f} MiB"


async def test_the_demo_client_streams_a_video_and_labels_each_frame(
    stack: StackConfig, tmp_path: Path
) -> None:
    video = tmp_path / "cat.webm"
    video.write_bytes(ten_seconds())
    target = f"127.0.0.1:{stack.public_port}"
    base = ("video", "--target", target, str(video), "--chunk-bytes", "16384", "--fps", "1")
    json_run = await demo_client(*base, "--json")
    assert json_run.returncode == 0, json_run.stderr
    summary = json.loads(json_run.stdout)
    assert summary["complete"] and summary["frames_classified"] == 10
    assert [f["index"] for f in summary["frames"]] == list(range(0, 100, 10))
    for frame in summary["frames"]:
        assert frame["class_index"] in media.CAT_CLASSES, frame
    assert summary["chunks"] == -(-len(ten_seconds()) // 16384)
    terminal = await demo_client(*base)
    assert terminal.returncode == 0, terminal.stderr
    lines = [line for line in terminal.stdout.splitlines() if line.startswith("frame ")]
    assert len(lines) == 10
    assert all(any(cat in line for cat in ("tabby", "cat")) for line in lines), lines


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str


async def demo_client(*args: str) -> Run:
    env = {**os.environ, "COLUMNS": "120"}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "demo_client", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return Run(proc.returncode, out.decode(), err.decode())
