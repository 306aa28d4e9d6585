"""The kubelet's probes, run from this machine against a pod's IP (gRPC health, HTTP GET, TCP)
or inside its container (exec)."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tools.containers.engine import Engine
from tools.pods.spec import Probe

POLL_S = 0.2  # the runner probes this often while it waits, to measure the time to ready


def check(probe: Probe, ip: str, engine: Engine, container: str) -> str | None:
    """None when ``probe`` succeeds once, else why it failed."""
    try:
        if probe.kind == "grpc":
            with grpc.insecure_channel(f"{ip}:{probe.port}") as channel:
                stub = health_pb2_grpc.HealthStub(channel)
                request = health_pb2.HealthCheckRequest(service=probe.service)
                status = stub.Check(request, timeout=probe.timeout_s).status
            serving = health_pb2.HealthCheckResponse.SERVING
            return None if status == serving else f"gRPC health {status}"
        if probe.kind == "http":
            url = f"{probe.scheme.lower()}://{ip}:{probe.port}{probe.path}"
            with urllib.request.urlopen(url, timeout=probe.timeout_s) as answer:
                return None if 200 <= answer.status < 400 else f"HTTP {answer.status}"
        if probe.kind == "tcp":
            with socket.create_connection((ip, probe.port), timeout=probe.timeout_s):
                return None
        done = engine.run(
            "exec", container, *probe.command, check=False, timeout=probe.timeout_s + 5
        )
        return None if done.returncode == 0 else f"exit {done.returncode}"
    except grpc.RpcError as e:
        return f"gRPC {e.code().name}"
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"
    except (OSError, urllib.error.URLError) as e:
        return str(e)


def wait(
    probe: Probe,
    ip: str,
    engine: Engine,
    container: str,
    deadline: float,
    running: Callable[[], bool],
) -> str | None:
    """Probe until it succeeds (None), the container stops, or ``deadline`` (monotonic) passes:
    then why."""
    why = "not probed"
    while time.monotonic() < deadline:
        why = check(probe, ip, engine, container) or ""
        if not why:
            return None
        if not running():
            return f"the container stopped (last probe: {why})"
        time.sleep(POLL_S)
    return f"not ready within its budget (last probe: {why})"
