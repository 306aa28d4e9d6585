"""``python -m demo_client`` end to end, against the in-process fake server."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from inferline_testing.ports import free_port
from inferline_testing.waits import wait_for

SUMMARY_KEYS = {
    "images",
    "errors",
    "images_per_s",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "duration_s",
    "concurrency",
    "errors_by_code",
}


@dataclass
class Result:
    rc: int
    out: str
    err: str


async def start(*args: str, cwd: Path) -> asyncio.subprocess.Process:
    """Start the CLI in a subprocess (the event loop keeps serving the fake meanwhile)."""
    env = {**os.environ, "COLUMNS": "100", "INFERLINE_TARGET": "127.0.0.1:1"}
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "demo_client",
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def finish(proc: asyncio.subprocess.Process) -> Result:
    out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return Result(proc.returncode, out.decode(), err.decode())


async def cli(*args: str, cwd: Path) -> Result:
    """Run the CLI to the end."""
    return await finish(await start(*args, cwd=cwd))


async def test_json_summary_counts_errors(
    fake: tuple[str, Any], mixed_images: Path, tmp_path: Path
) -> None:
    target, servicer = fake
    traced = len(servicer.traceparents)
    r = await cli(
        "load", "--target", target, "--images", str(mixed_images), "--count", "8",
        "--concurrency", "2", "--json", "--wait", "10", cwd=tmp_path,
    )  # fmt: skip
    assert r.rc == 0, r.err
    summary = json.loads(r.out)  # exactly one JSON object, nothing else
    assert summary.keys() >= SUMMARY_KEYS
    assert summary["images"] == 6
    assert summary["errors"] == 2
    assert summary["errors_by_code"] == {"INVALID_ARGUMENT": 2}
    assert summary["concurrency"] == 2
    assert summary["images_per_s"] > 0
    assert 0 < summary["p50_ms"] <= summary["p95_ms"] <= summary["p99_ms"]
    assert len(servicer.traceparents) == traced  # no timed request without the web view


async def test_duration_run_with_batches(target: str, good_images: Path, tmp_path: Path) -> None:
    r = await cli(
        "load", "--target", target, "--images", str(good_images), "--duration", "0.5",
        "--concurrency", "3", "--batch", "4", "--channels", "2", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert r.rc == 0, r.err
    summary = json.loads(r.out)
    assert summary["errors"] == 0
    assert summary["images"] > 0 and summary["images"] % 4 == 0
    assert 0.5 <= summary["duration_s"] < 10


async def test_every_request_failing_exits_non_zero(target: str, tmp_path: Path) -> None:
    images = tmp_path / "bad"
    images.mkdir()
    (images / "x.jpg").write_bytes(b"BAD")
    r = await cli(
        "load", "--target", target, "--images", str(images), "--count", "3", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.rc == 1
    assert json.loads(r.out)["errors_by_code"] == {"INVALID_ARGUMENT": 3}
    assert "every request" in r.err and "INVALID_ARGUMENT" in r.err
    assert "Traceback" not in r.err


async def test_live_view_and_summary_table(target: str, good_images: Path, tmp_path: Path) -> None:
    r = await cli(
        "load", "--target", target, "--images", str(good_images), "--count", "20",
        cwd=tmp_path,
    )  # fmt: skip
    assert r.rc == 0, r.err
    assert "images/s" in r.out and "p99" in r.out
    assert re.search(r"images\s*│\s*20\b", r.out), r.out


async def test_ctrl_c_prints_the_summary_and_exits_0(
    fake: tuple[str, Any], good_images: Path, tmp_path: Path
) -> None:
    target, servicer = fake
    servicer.infer_seen.clear()
    proc = await start(
        "load", "--target", target, "--images", str(good_images), "--duration", "120",
        "--json", cwd=tmp_path,
    )  # fmt: skip
    await asyncio.wait_for(servicer.infer_seen.wait(), timeout=60)  # the load is running
    proc.send_signal(signal.SIGINT)
    r = await finish(proc)
    assert r.rc == 0, r.err
    summary = json.loads(r.out)
    assert summary["duration_s"] < 60
    assert summary["errors"] == 0
    assert "Traceback" not in r.err


async def test_classify_prints_top_5(target: str, good_images: Path, tmp_path: Path) -> None:
    files = [good_images / "a.jpg", good_images / "b.png"]
    r = await cli("classify", "--target", target, *map(str, files), cwd=tmp_path)
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    assert len(lines) == 14
    for block, path in zip((lines[:7], lines[7:]), files, strict=True):
        assert block[0] == str(path)
        for line in block[1:6]:
            assert re.fullmatch(r"  class \d+ \(\d\.\d{3}\)", line), line
        assert block[6] == (  # where its time went, as the fake's answers say
            "  time: envoy 9.0 ms  middleman 8.5 ms  queue 1.5 ms  batch 6.0 ms  decode 1.0 ms  "
            "infer 4.0 ms"
        )


async def test_a_token_goes_with_every_call(
    fake: tuple[str, Any], good_images: Path, tmp_path: Path
) -> None:
    target, servicer = fake
    token = f"token-{tmp_path.name}"  # this test's own: other tests' calls carry none
    r = await cli("classify", "--target", target, "--token", token, str(good_images / "a.jpg"),
                  cwd=tmp_path)  # fmt: skip
    assert r.rc == 0, r.err
    methods = {method for method, value in servicer.authorization if value == f"Bearer {token}"}
    assert methods == {"ModelReady", "ModelInfer"}  # the readiness check and the request


async def test_classify_json_and_a_bad_file(target: str, good_images: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"BAD")
    good = good_images / "c.jpg"
    missing = tmp_path / "missing.jpg"
    r = await cli(
        "classify", "--target", target, "--json", "--top-k", "3", str(good), str(bad),
        str(missing), cwd=tmp_path,
    )  # fmt: skip
    assert r.rc == 1
    results = json.loads(r.out)
    assert list(results) == [str(good)]
    assert len(results[str(good)]) == 3
    assert "INVALID_ARGUMENT" in r.err and "missing.jpg" in r.err
    assert "Traceback" not in r.err


async def test_unreachable_target_exits_with_a_message(unused_target: str, tmp_path: Path) -> None:
    images = tmp_path / "imgs"
    images.mkdir()
    (images / "a.jpg").write_bytes(b"whatever")
    r = await cli(
        "load", "--target", unused_target, "--images", str(images), "--wait", "0.5", cwd=tmp_path
    )  # fmt: skip
    assert r.rc == 3
    assert f"{unused_target} is not ready after 0.5 s" in r.err
    assert "UNAVAILABLE" in r.err
    assert "Traceback" not in r.err


async def test_target_comes_from_the_environment(tmp_path: Path) -> None:
    r = await cli("classify", "x.jpg", "--wait", "0", cwd=tmp_path)
    assert r.rc == 3
    assert "127.0.0.1:1 is not ready" in r.err


async def test_an_unknown_model_fails_at_once_naming_the_served_ones(
    target: str, tmp_path: Path
) -> None:
    r = await cli(
        "classify", "--target", target, "--model", "nope", "x.jpg", "--wait", "0", cwd=tmp_path
    )
    assert r.rc == 3
    assert (
        "model 'nope' is not served there; it serves classifier, classifier_video, pixels" in r.err
    )


async def test_missing_default_image_dir_is_built(target: str, tmp_path: Path) -> None:
    r = await cli("load", "--target", target, "--count", "2", "--json", cwd=tmp_path)
    assert r.rc == 0, r.err
    assert (tmp_path / ".run" / "samples" / "chelsea.jpg").is_file()
    assert json.loads(r.out)["images"] == 2


@pytest.mark.parametrize("flag", ["--concurrency=0", "--duration=-1", "--batch=x"])
async def test_bad_flags_are_usage_errors(flag: str, tmp_path: Path) -> None:
    r = await cli("load", flag, cwd=tmp_path)
    assert r.rc == 2
    assert "Traceback" not in r.err


async def test_web_view_serves_the_running_load(
    fake: tuple[str, Any], good_images: Path, tmp_path: Path
) -> None:
    target, servicer = fake
    port = free_port()
    proc = await start(
        "load", "--target", target, "--images", str(good_images), "--duration", "120",
        "--json", "--web", "--web-port", str(port), "--envoy-admin", "",
        "--trace-view", "http://traces.example/t/{trace_id}", cwd=tmp_path,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    async with aiohttp.ClientSession() as session:

        async def labelled() -> dict[str, Any]:
            try:
                async with session.get(f"{url}/snapshot") as response:
                    snapshot: dict[str, Any] = await response.json()
            except aiohttp.ClientError:  # not listening yet
                return {}
            shown = snapshot["images"] and snapshot["recent"] and snapshot["timing"]["recent"]
            return snapshot if shown else {}

        def exited() -> str | None:
            return None if proc.returncode is None else f"it exited {proc.returncode}"

        snapshot = await wait_for(
            labelled, 60, "images, labels and timed requests on the page", abort=exited
        )
        async with session.get(f"{url}/") as response:
            assert response.status == 200 and "inferline demo" in await response.text()
    assert snapshot["phase"] == "running" and snapshot["run"]["target"] == target
    recent = snapshot["recent"][0]
    assert recent["name"] in {"a.jpg", "b.png", "c.jpg"}
    assert re.fullmatch(r"class \d+", recent["label"]) and 0 < recent["score"] <= 1
    assert not snapshot["replicas"]["available"]
    assert "--envoy-admin" in snapshot["replicas"]["note"]
    timed = snapshot["timing"]["recent"][0]  # timed hop by hop, traced under its own id
    assert timed["server_timing"]["infer"] == 4.0
    assert timed["trace_url"] == f"http://traces.example/t/{timed['trace_id']}"
    assert any(f"-{timed['trace_id']}-" in sent for sent in servicer.traceparents)
    proc.send_signal(signal.SIGINT)
    r = await finish(proc)
    assert r.rc == 0, r.err
    assert json.loads(r.out)["errors"] == 0  # the labelled requests count as any other
    assert f"web view: {url}/" in r.err


async def test_a_taken_web_port_is_a_clear_error(good_images: Path, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = await cli(
            "load", "--web", "--web-port", str(port), "--images", str(good_images), cwd=tmp_path
        )
    assert r.rc == 1
    assert f"cannot serve the web view on 127.0.0.1:{port}" in r.err
    assert "Traceback" not in r.err


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--ca", "nope.crt"], "--ca nope.crt: cannot read it"),
        (["--cert", "client.crt"], "--cert and --key go together"),
        (["--tls", "--cert", "c.crt", "--key", "c.key"], "--cert c.crt: cannot read it"),
    ],
)
async def test_unreadable_tls_files_are_named(flags: list[str], words: str, tmp_path: Path) -> None:
    r = await cli("classify", "cat.jpg", *flags, cwd=tmp_path)
    assert r.rc == 1 and words in r.err, r.err
    assert "Traceback" not in r.err
