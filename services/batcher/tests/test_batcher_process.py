"""``python -m batcher`` as a process: config from the environment, /metrics, SIGTERM."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import sys

import aiohttp
import grpc
import pytest
from tritonclient.grpc import service_pb2_grpc

from batcher.config import PREFIX, Config
from inferline.config import env_name
from inferline_testing.ports import free_port

from .conftest import FakeUpstream, infer_request, serve, wait_serving


async def test_runs_serves_metrics_and_stops_on_sigterm() -> None:
    fake = FakeUpstream()
    upstream, upstream_port = await serve(
        lambda s: service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(fake, s)
    )
    port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        "INFERLINE_BATCHER_HOST": "127.0.0.1",
        "INFERLINE_BATCHER_PORT": str(port),
        "INFERLINE_BATCHER_METRICS_PORT": str(metrics_port),
        "INFERLINE_BATCHER_UPSTREAM_URL": f"127.0.0.1:{upstream_port}",
        "INFERLINE_BATCHER_MAX_QUEUE_DELAY_MS": "0",
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "batcher", env=env, stderr=asyncio.subprocess.PIPE
    )
    try:
        await wait_serving(f"127.0.0.1:{port}")
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            reply = await stub.ModelInfer(infer_request(b"proc"), timeout=10)
        assert reply.id == "proc"
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{metrics_port}/metrics") as response,
        ):
            text = await response.text()
        assert 'inferline_batcher_batch_size_items_count{model="echo"} 1.0' in text
        assert "inferline_batcher_queue_depth_requests" in text
        ok = '{code="OK",method="ModelInfer",model="echo"}'
        assert f"inferline_batcher_grpc_requests_total{ok}" in text
        assert f"inferline_batcher_queue_capacity_requests {Config().max_queue:.1f}" in text
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0
        assert process.stderr is not None
        log = (await process.stderr.read()).decode()
        assert "batching for upstream" in log and "stopped" in log
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await upstream.stop(None)


async def test_a_bad_setting_stops_start_up_by_name() -> None:
    env = {**os.environ, "INFERLINE_BATCHER_MAX_QUEUE": "0"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "batcher", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 1
    assert "INFERLINE_BATCHER_MAX_QUEUE: must be at least 1" in stderr.decode()


@pytest.mark.parametrize("flag", ["--help"])
async def test_help_lists_every_setting(flag: str) -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "batcher", flag, stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await asyncio.wait_for(process.communicate(), 30)
    text = stdout.decode()
    settings = [field.name for field in dataclasses.fields(Config)]
    for name in settings:
        flag = f"--{name.replace('_', '-')} "
        assert flag in text and f"env {env_name(PREFIX, name)}\n" in text, name
