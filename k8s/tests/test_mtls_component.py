"""components/mtls with the real processes, each with the settings its pod renders.

eds, with its Deployment's environment, serves xDS only over mTLS and answers the kubelet's
probe (plaintext, no certificate) on its health port. The real Envoy, with the bootstrap its init
container renders, takes its configuration from that eds over mTLS and reaches a GPU pod's front
door over mTLS: a real gRPC server with the pod's settings and the `triton` certificate, which
refuses any client without a certificate the CA signed. Its health checks pass and a call through
Envoy's triton listener is answered.

Certificates come from one local CA (`make certs`), laid out as cert-manager writes its Secrets
(tls.crt, tls.key, ca.crt), each where the manifests mount it (moved under the test's folder);
cert-manager itself needs a cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from eds.cache import Endpoint
from eds.sources import endpoints_file
from inferline.server import RunningServer, start_server
from inferline.tls import ServerTls
from inferline_envoy import admin as envoy_admin
from inferline_envoy.template import dump
from inferline_stack import certs
from inferline_testing.harness import EnvoyProcess, Process, python, wait_serving
from inferline_testing.ports import free_port
from k8s.tests import manifests
from k8s.tests.manifests import Container, render

pytestmark = pytest.mark.e2e

WAIT_S = 60.0  # only bounds how long a broken run takes to fail
MTLS_DIR = "/etc/inferline-tls"  # where every pod of the component mounts its Secret
# The Secret each pod mounts, and whose certificate (of `make certs`'s) stands in for it.
IDENTITY = {"eds-tls": "eds", "triton-tls": "triton", "envoy-client-tls": certs.CLIENT}


def container(objects: list[dict[str, Any]], deployment: str, name: str) -> Container:
    [found] = [
        c
        for c in manifests.containers([manifests.find(objects, "Deployment", deployment)])
        if c.name == name
    ]
    return found


def secret_dir(found: Container, made: certs.Certs, tmp_path: Path) -> Path:
    """The Secret ``found``'s pod mounts at MTLS_DIR, as cert-manager writes it, in a folder."""
    [mount] = [m for m in found.spec["volumeMounts"] if m["mountPath"] == MTLS_DIR]
    [volume] = [v for v in found.pod["volumes"] if v["name"] == mount["name"]]
    secret = volume["secret"]["secretName"]
    folder = tmp_path / str(secret)
    folder.mkdir(exist_ok=True)
    identity = IDENTITY[secret]
    (folder / "tls.crt").write_bytes(made.cert(identity).read_bytes())
    (folder / "tls.key").write_bytes(made.key(identity).read_bytes())
    (folder / "ca.crt").write_bytes(made.ca.read_bytes())
    return folder


def moved(env: dict[str, str], folder: Path) -> dict[str, str]:
    return {k: str(v).replace(MTLS_DIR, str(folder)) for k, v in env.items()}


async def health(address: str, credentials: grpc.ChannelCredentials | None = None) -> int:
    channel = (
        grpc.aio.insecure_channel(address)
        if credentials is None
        else grpc.aio.secure_channel(address, credentials)
    )
    async with channel:
        request = health_pb2.HealthCheckRequest()
        reply = await health_pb2_grpc.HealthStub(channel).Check(request, timeout=10)
        return int(reply.status)


@pytest.fixture
async def gpu_pod(tmp_path: Path) -> AsyncIterator[tuple[RunningServer, dict[str, str]]]:
    """A GPU pod's front door as components/mtls sets up its preprocess: the triton certificate,
    mTLS, a plaintext health port (a real gRPC server; decoding is not what this tests)."""
    objects = render("components/mtls")
    preprocess = container(objects, "triton", "preprocess")
    made = certs.ensure(tmp_path / "certs")
    env = moved(preprocess.env(), secret_dir(preprocess, made, tmp_path))
    tls = ServerTls(
        env["INFERLINE_PREPROCESS_TLS_CERT"],
        env["INFERLINE_PREPROCESS_TLS_KEY"],
        env["INFERLINE_PREPROCESS_TLS_CA"],
    )
    server = await start_server(
        "gpu-pod", 0, [], ["inference.GRPCInferenceService"], host="127.0.0.1", tls=tls,
        health_port=0,
    )  # fmt: skip
    try:
        yield server, env
    finally:
        await server.stop(0)


async def test_envoy_reaches_eds_and_a_gpu_pod_over_mtls_with_the_rendered_settings(
    tmp_path: Path, gpu_pod: tuple[RunningServer, dict[str, str]]
) -> None:
    objects = render("components/mtls")
    made = certs.ensure(tmp_path / "certs")
    pod, pod_env = gpu_pod
    preprocess = container(objects, "triton", "preprocess")
    assert preprocess.probe_port() == int(pod_env["INFERLINE_PREPROCESS_HEALTH_PORT"])
    assert preprocess.probe_port() != preprocess.port("grpc")
    # The kubelet's probe (no certificate) on the health port; the service port refuses it.
    assert await health(f"127.0.0.1:{pod.probe_port}") == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.aio.AioRpcError) as plaintext:
        await health(f"127.0.0.1:{pod.port}")
    assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE

    # eds as its Deployment runs it, reading endpoints from a file instead of the API server.
    eds = container(objects, "eds", "eds")
    env = moved({k: v for k, v in eds.env().items() if isinstance(v, str)},
                secret_dir(eds, made, tmp_path))  # fmt: skip
    assert int(env["INFERLINE_EDS_HEALTH_PORT"]) == eds.probe_port() != eds.port("grpc")
    endpoints = tmp_path / "endpoints.yaml"
    endpoints_file.write(endpoints, {"triton": [Endpoint("127.0.0.1", pod.port, name="gpu-0")]})
    eds_port, health_port = free_port(), free_port()
    env.update(
        INFERLINE_EDS_HOST="127.0.0.1", INFERLINE_EDS_PORT=str(eds_port),
        INFERLINE_EDS_METRICS_PORT=str(free_port()), INFERLINE_EDS_HEALTH_PORT=str(health_port),
        INFERLINE_EDS_SOURCE="file", INFERLINE_EDS_ENDPOINTS_FILE=str(endpoints),
    )  # fmt: skip
    process = Process("eds", python("eds"), tmp_path / "logs" / "eds.log", env)
    envoy: EnvoyProcess | None = None
    try:
        await process.start()
        await wait_serving(f"127.0.0.1:{health_port}", process, WAIT_S)  # the kubelet's probe
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await health(f"127.0.0.1:{eds_port}")
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

        # Envoy with the bootstrap and SDS files its pod renders, its Secret moved here.
        bootstrap = manifests.envoy_bootstrap(objects)
        folder = secret_dir(container(objects, "envoy", "envoy"), made, tmp_path)
        sds = tmp_path / "sds"
        sds.mkdir()

        def local(text: str) -> str:
            return text.replace(MTLS_DIR, str(folder)).replace(bootstrap.params.sds_dir, str(sds))

        for name, resource in bootstrap.sds.items():
            (sds / name).write_text(local(dump(resource)), encoding="utf-8")
        config, params = manifests.local_bootstrap(local(bootstrap.text()), eds_port)
        envoy = EnvoyProcess(tmp_path, params, config=yaml.safe_load(dump(config)))
        await envoy.start_ready(WAIT_S)

        # Its configuration came over mTLS; its health checks reach the pod over mTLS.
        host = await envoy_admin.wait_routable(envoy.admin, "triton", "127.0.0.1", pod.port, WAIT_S)
        assert host is not None and host.hostname == "gpu-0"
        handshakes = await envoy_admin.stats(
            envoy.admin, r"^cluster\.(xds|triton)\.ssl\.handshake$"
        )
        assert all(int(handshakes[f"cluster.{c}.ssl.handshake"]) >= 1 for c in ("xds", "triton"))
        # A call through the triton listener (plaintext in, mTLS out) is answered by the pod.
        assert await health(envoy.listener("triton")) == health_pb2.HealthCheckResponse.SERVING
    finally:
        if envoy is not None:
            await envoy.stop()
        await process.stop(5.0)
