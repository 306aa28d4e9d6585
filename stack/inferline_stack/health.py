"""Readiness over KServe v2 gRPC (ServerReady and ModelReady), polled with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable

import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException


def ready(address: str, model: str, timeout: float = 2.0) -> bool:
    """True when the server at ``address`` answers ready and so does ``model``."""
    client = triton.InferenceServerClient(address)
    try:
        return bool(
            client.is_server_ready(client_timeout=timeout)
            and client.is_model_ready(model, client_timeout=timeout)
        )
    except InferenceServerException:
        return False
    finally:
        client.close()


def wait_ready(address: str, model: str, timeout: float, still_running: Callable[[], bool]) -> bool:
    """Poll readiness until ``timeout``; give up early once the process has exited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready(address, model):
            return True
        if not still_running():
            return False
        time.sleep(0.25)  # poll interval between readiness RPCs, not a readiness guess
    return False
