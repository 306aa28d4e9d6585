"""Readiness checks, polled with a deadline: KServe v2 (ServerReady and ModelReady) for the
pipeline's services, ``grpc.health.v1`` for the control plane, ``/ready`` for Envoy.

With the stack's TLS on, a check of a service's own port presents Envoy's client certificate
(the services require one), and a check of the public listener trusts the local CA."""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import tritonclient.grpc as triton
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from inferline_envoy import admin as envoy_admin

POLL_S = 0.1  # between readiness checks; the check itself is the signal, not the wait


@dataclass(frozen=True)
class ClientTls:
    """What a TLS client trusts (``ca``) and, for mTLS, the certificate it presents."""

    ca: str
    cert: str | None = None
    key: str | None = None

    def credentials(self) -> grpc.ChannelCredentials:
        def read(path: str | None) -> bytes | None:
            return None if path is None else Path(path).read_bytes()

        return grpc.ssl_channel_credentials(read(self.ca), read(self.key), read(self.cert))


def ready(address: str, *models: str, timeout: float = 2.0, tls: ClientTls | None = None) -> bool:
    """True when the server at ``address`` answers ready and so does each of ``models``."""
    client = triton.InferenceServerClient(address, creds=tls.credentials() if tls else None)
    try:
        return client.is_server_ready(client_timeout=timeout) and all(
            client.is_model_ready(model, client_timeout=timeout) for model in models
        )
    except InferenceServerException:
        return False
    finally:
        client.close()


def serving(address: str, timeout: float = 2.0, tls: ClientTls | None = None) -> bool:
    """True when ``grpc.health.v1`` Check("") at ``address`` answers SERVING."""
    channel = (
        grpc.insecure_channel(address)
        if tls is None
        else grpc.secure_channel(address, tls.credentials())
    )
    with channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=timeout
            )
        except grpc.RpcError:
            return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


def http_ok(url: str, timeout: float = 2.0) -> bool:
    """True when ``url`` answers 200 (an HTTP server's own readiness path)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


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
