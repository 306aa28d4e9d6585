"""The real Triton behind the real Envoy: its gRPC endpoint answers Envoy's grpc.health.v1
checks, and a real inference of the real model goes through the Envoy hop.

Uses the session's local stack (the root conftest's ``stack``: Triton with the exported
EfficientNet-Lite0), so it costs nothing extra when the end-to-end tests run too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.grpc.aio import InferenceServerClient, InferInput

from eds.cache import Endpoint
from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin
from inferline_testing.harness import EdsProcess, EnvoyProcess, envoy_params

pytestmark = pytest.mark.e2e


@pytest.fixture
async def envoy_to_triton(stack: Any, tmp_path: Path) -> AsyncIterator[tuple[EnvoyProcess, int]]:
    port = int(stack.triton_grpc_port)
    endpoints = tmp_path / "endpoints.yaml"
    endpoints_file.write(endpoints, {"triton": [Endpoint("127.0.0.1", port, name="triton-0")]})
    eds = EdsProcess(tmp_path, endpoints, ["triton"])
    await eds.start_ready()
    envoy = EnvoyProcess(tmp_path, envoy_params(eds.port, ["triton"]))
    try:
        await envoy.start_ready()
        yield envoy, port
    finally:
        await envoy.stop()
        await eds.stop()


async def test_triton_serves_grpc_health(stack: Any) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.triton_grpc_port}") as channel:
        reply = await health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=5
        )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_envoy_health_checks_and_routes_to_the_real_triton(
    envoy_to_triton: tuple[EnvoyProcess, int], stack: Any
) -> None:
    envoy, port = envoy_to_triton
    host = await envoy_admin.wait_routable(envoy.admin, "triton", "127.0.0.1", port, 10)
    assert host is not None and not host.flags  # passed its gRPC health check
    client = InferenceServerClient(envoy.listener("triton"))
    try:
        tensor = InferInput("INPUT", [2, 3, 224, 224], "UINT8")
        tensor.set_data_from_numpy(np.zeros((2, 3, 224, 224), np.uint8))
        result = await client.infer(stack.model, [tensor], client_timeout=60)
        probabilities = result.as_numpy("PROBS")
    finally:
        await client.close()
    assert probabilities.shape == (2, 1000)
    assert np.allclose(probabilities.sum(axis=1), 1.0, atol=1e-3)
