"""``python -m demo_client video`` and its API against the in-process fake server, which answers
each chunk with a frame at once: results arrive while the upload goes on; the sequence is what
tritonclient sends for a stateful stream; the CLI prints each frame, or one JSON object, and fails
with a message."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest
from tritonclient.utils import InferenceServerException

from demo_client.client import open_clients
from demo_client.video import FrameLabel, Sampling, VideoStream, summarize

from .conftest import BAD, SLOW, FakeKServe
from .test_demo_client_cli import cli, finish, start

CHUNK = 1000


@pytest.fixture
def video_file(tmp_path: Path) -> Path:
    """5,500 bytes: six chunks of 1,000 (the fake decodes nothing; any bytes do)."""
    path = tmp_path / "clip.mp4"
    path.write_bytes(bytes(range(250)) * 22)
    return path


async def stream_all(target: str, path: Path, **kwargs: Any) -> tuple[list[FrameLabel], Any]:
    async with open_clients(target) as clients:
        stream = VideoStream(clients[0], path, CHUNK, **kwargs)
        frames = [frame async for frame in stream]
    return frames, stream


async def test_each_frame_arrives_while_the_upload_goes_on(
    fake: tuple[str, FakeKServe], video_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target, servicer = fake
    servicer.video_chunks.clear()
    # A slow upload: after its first chunk, the rest waits until the first frame has come (on a
    # fast one the client may send all six chunks before it reads any answer). A client that
    # read no answer before its upload ended would hang here, and time out.
    first_frame, upload = asyncio.Event(), VideoStream._requests

    async def slow_upload(stream: VideoStream, file: Any) -> Any:
        async for request in upload(stream, file):
            yield request
            await first_frame.wait()

    monkeypatch.setattr(VideoStream, "_requests", slow_upload)
    async with asyncio.timeout(30), open_clients(target) as clients:
        stream = VideoStream(clients[0], video_file, CHUNK, sampling=Sampling(fps=2.0))
        frames = []
        async for frame in stream:
            frames.append(frame)
            first_frame.set()
    assert [f.index for f in frames] == [0, 10, 20, 30, 40, 50]
    assert [f.label for f in frames] == ["tabby"] * 6 and frames[0].score == pytest.approx(0.9)
    assert [f.last for f in frames] == [False] * 5 + [True]
    assert frames[0].bytes_sent < frames[0].total_bytes == 5500  # before the upload's end
    assert stream.chunks_sent == 6 and stream.bytes_sent == 5500
    summary = summarize(stream, frames)
    assert summary.complete and summary.first_result_s is not None
    assert summary.to_dict()["frames_classified"] == 6


async def test_the_chunks_are_one_sequence_as_tritonclient_sends_it(
    fake: tuple[str, FakeKServe], video_file: Path
) -> None:
    target, servicer = fake
    servicer.video_chunks.clear()
    await stream_all(target, video_file, sampling=Sampling(every_n=5, max_frames=3))
    chunks = servicer.video_chunks
    assert b"".join(c.raw_input_contents[0][4:] for c in chunks) == bytes(range(250)) * 22
    params = [{k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in c.parameters.items()}
              for c in chunks]  # fmt: skip
    ids = {p.pop("sequence_id") for p in params}
    assert len(ids) == 1 and ids != {0}
    assert params[0] == {
        "sequence_start": True, "sequence_end": False, "video_bytes": 5500, "every_n": 5,
        "max_frames": 3,
    }  # fmt: skip
    assert params[1:] == [{"sequence_start": False, "sequence_end": False}] * 4 + [
        {"sequence_start": False, "sequence_end": True}
    ]
    assert [o.name for o in chunks[0].outputs] == ["FRAME_INDEX", "TIMESTAMP", "PROBABILITIES"]


async def test_a_refused_video_raises_with_the_servers_status(target: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.mkv"
    bad.write_bytes(BAD + b" not a video")
    with pytest.raises(InferenceServerException) as caught:
        await stream_all(target, bad)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert caught.value.message() == "video: not a video"


async def test_cli_video_json(target: str, video_file: Path, tmp_path: Path) -> None:
    r = await cli(
        "video", "--target", target, str(video_file), "--chunk-bytes", str(CHUNK), "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.rc == 0, r.err
    summary = json.loads(r.out)  # exactly one JSON object
    assert summary["model"] == "classifier_video" and summary["target"] == target
    assert summary["bytes"] == 5500 and summary["chunks"] == 6 and summary["complete"]
    assert summary["frames_classified"] == 6 and summary["frames_per_s"] > 0
    assert summary["frames"][0] == {
        "index": 0, "timestamp_s": 0.0, "label": "tabby", "score": 0.9, "class_index": 281,
        "bytes_sent": summary["frames"][0]["bytes_sent"],
        "elapsed_s": summary["frames"][0]["elapsed_s"],
    }  # fmt: skip
    assert 0 < summary["first_result_s"] <= summary["duration_s"]


async def test_cli_video_prints_each_frame_and_a_summary(
    target: str, video_file: Path, tmp_path: Path
) -> None:
    r = await cli(
        "video", "--target", target, str(video_file), "--chunk-bytes", str(CHUNK), "--fps",
        "1", cwd=tmp_path,
    )  # fmt: skip
    assert r.rc == 0, r.err
    lines = [line for line in r.out.splitlines() if line.startswith("frame ")]
    assert len(lines) == 6, r.out
    assert "tabby (0.900)" in lines[1] and "10" in lines[1]
    assert "frames classified" in r.out and "first result" in r.out


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("missing.mp4", "missing.mp4: No such file"),
        ("bad.mkv", "INVALID_ARGUMENT: video: not a video"),
    ],
)
async def test_cli_video_fails_with_a_message(
    target: str, tmp_path: Path, name: str, words: str
) -> None:
    (tmp_path / "bad.mkv").write_bytes(BAD)
    r = await cli("video", "--target", target, str(tmp_path / name), "--json", cwd=tmp_path)
    assert r.rc == 1
    assert words in r.err
    assert "Traceback" not in r.err


async def test_cli_video_ctrl_c_prints_what_it_has_and_exits_130(
    fake: tuple[str, FakeKServe], tmp_path: Path
) -> None:
    target, servicer = fake
    video = tmp_path / "slow.mkv"
    video.write_bytes(SLOW + bytes(5000))
    servicer.video_seen.clear()
    proc = await start("video", "--target", target, str(video), "--json", cwd=tmp_path)
    await asyncio.wait_for(servicer.video_seen.wait(), timeout=60)  # the upload is going on
    proc.send_signal(signal.SIGINT)
    r = await finish(proc)
    assert r.rc == 130, r.err
    summary = json.loads(r.out)
    assert not summary["complete"] and summary["frames"] == []
    assert "Traceback" not in r.err
