"""Per-hop timing in every answer (:mod:`inferline.timing`), through the real stack: Envoy's
front door, middleman, the batcher dialled proxyless, the GPU pod and its Triton."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import aiohttp
import grpc
import numpy as np
import pytest
import tritonclient.http as http
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferline import timing
from inferline_stack.config import StackConfig
from inferline_testing import media
from inferline_testing.requests import bytes_request

pytestmark = pytest.mark.e2e

HOPS = ["envoy", "middleman", "queue", "batch", "decode", "infer"]


def image_request() -> service_pb2.ModelInferRequest:
    image = media.encode(media.photo("chelsea")[:96, :128])
    return bytes_request([image])


def assert_each_hop_once_within_the_whole(entries: list[timing.Entry]) -> None:
    names = [name for name, _ in entries]
    assert sorted(names) == sorted(HOPS), entries
    took = dict(entries)
    assert all(ms > 0 for ms in took.values()), entries
    # Each hop's time holds the hops beneath it; Envoy's is in whole milliseconds, cut down
    # (%RESPONSE_DURATION%): 36 is anything from 36 to 37.
    assert took["envoy"] + 1 > took["middleman"] >= took["batch"]
    assert took["batch"] >= took["infer"] and took["middleman"] >= took["queue"]


async def test_a_grpc_answer_says_where_its_time_went(stack: StackConfig) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.public_port}") as channel:
        call = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
            image_request(), timeout=10
        )
        await call
        # Envoy's share in the headers (it answers before middleman's trailers come)
        headers, trailers = await call.initial_metadata(), await call.trailing_metadata()
    entries = [e for m in (headers, trailers) for k, v in m if k == timing.KEY
               for e in timing.parse(str(v))]  # fmt: skip
    assert_each_hop_once_within_the_whole(entries)


async def test_a_rest_answer_has_a_server_timing_header(stack: StackConfig) -> None:
    tensor = http.InferInput("IMAGE", [1], "BYTES")
    image = media.encode(media.photo("chelsea")[:96, :128])
    tensor.set_data_from_numpy(np.array([image], dtype=np.object_), binary_data=True)
    body, json_size = http.InferenceServerClient.generate_request_body([tensor])
    url = f"http://127.0.0.1:{stack.public_port}/v2/models/classifier/infer"
    headers = {"Inference-Header-Content-Length": str(json_size)}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as answer,
    ):
        assert answer.status == 200, await answer.text()
        values = answer.headers.getall("Server-Timing")
    entries = [e for value in values for e in timing.parse(value)]
    assert_each_hop_once_within_the_whole(entries)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_demo_clients_classify_prints_where_the_time_went(
    stack: StackConfig, protocol: str, tmp_path: Path
) -> None:
    cat = tmp_path / "cat.jpg"
    cat.write_bytes(media.cat_jpeg())
    target = f"127.0.0.1:{stack.public_port}"
    command = [sys.executable, "-m", "demo_client", "classify", "--target", target,
               "--protocol", protocol, str(cat)]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    [line] = [line for line in run.stdout.splitlines() if line.startswith("  time: ")]
    hops = re.findall(r"(\w+) [\d.]+ ms", line)
    assert hops == HOPS, line  # in the pipeline's order
