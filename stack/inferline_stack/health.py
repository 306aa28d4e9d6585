"""Readiness checks, polled with a deadline: KServe v2 (ServerReady and ModelReady) for the
pipeline's services, ``grpc.health.v1`` for the control plane, ``/ready`` for Envoy."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import grpc
import tritonclient.grpc as triton
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from inferline_envoy import admin as envoy_admin

POLL_S = 0.1  # between readiness checks; the check itself is the signal, not the wait


def ready(address: str, *models: str, timeout: float = 2.0) -> bool:
    """True when the server at ``address`` answers ready and so does each of ``models``."""
    client = triton.InferenceServerClient(address)
    try:
        return client.is_server_ready(client_timeout=timeout) and all(
            client.is_model_ready(model, client_timeout=timeout) for model in models
        )
    except InferenceServerException:
        return False
    finally:
        client.close()


def serving(address: str, timeout: float = 2.0) -> bool:
    """True when ``grpc.health.v1`` Check("") at ``address`` answers SERVING."""
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def envoy_ready(admin: str, timeout: float = 2.0) -> bool:
    """True when Envoy's admin ``/ready`` says LIVE (its EDS clusters got their first answer)."""
    return asyncio.run(envoy_admin.ready(admin, timeout))


def wait_until(
    check: Callable[[], bool], timeout: float, still_running: Callable[[], bool]
) -> bool:
    """Poll ``check`` until it holds or ``timeout``; give up early once the process has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        if not still_running():
            return False
        time.sleep(POLL_S)
    return False


def wait_ready(address: str, model: str, timeout: float, still_running: Callable[[], bool]) -> bool:
    """Poll KServe readiness of ``model`` at ``address`` (see :func:`wait_until`)."""
    return wait_until(lambda: ready(address, model), timeout, still_running)
