"""The stack with TLS on (INFERLINE_STACK_TLS=true): Envoy's public listener serves only TLS
(gRPC and REST over one port, by ALPN), and Envoy reaches every service over mTLS, their own
ports refusing any client without a certificate the stack's CA signed.

One more stack of its own, on free ports, with certificates `make certs` makes into its run
directory; every check is a real client against the real processes.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
import tritonclient.http.aio as triton_http
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from inferline_stack import certs, health, services
from inferline_stack.config import StackConfig
from inferline_testing import media
from inferline_testing.stacks import stack_fixture

pytestmark = pytest.mark.e2e

TIMEOUT_S = 10.0


# A stack of its own with TLS on: one model, no Prometheus (nothing here needs them).
tls_stack = stack_fixture("TLS", models="", prometheus=False, tls=True)


@pytest.fixture(scope="module")
def ca(tls_stack: StackConfig) -> str:
    return str(services.stack_certs(tls_stack).ca)


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A CA that signed none of the stack's certificates."""
    return str(certs.ensure(tmp_path_factory.mktemp("other-ca")).ca)


def public(config: StackConfig) -> str:
    return f"localhost:{config.public_port}"


def cat_request() -> tuple[list[Any], list[Any]]:
    tensor = triton.InferInput("IMAGE", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([media.cat_jpeg()], dtype=np.object_))
    return [tensor], [triton.InferRequestedOutput("PROBABILITIES", class_count=3)]


def top_indices(row: Any) -> set[int]:
    return {int(item.split(b":")[1]) for item in row}


def test_a_grpc_client_over_tls_classifies_a_cat(tls_stack: StackConfig, ca: str) -> None:
    with triton.InferenceServerClient(public(tls_stack), ssl=True, root_certificates=ca) as client:
        inputs, outputs = cat_request()
        result = client.infer("classifier", inputs, outputs=outputs, client_timeout=TIMEOUT_S)
    assert top_indices(result.as_numpy("PROBABILITIES")[0]) & set(media.CAT_CLASSES)


async def test_a_rest_client_over_tls_classifies_a_cat(tls_stack: StackConfig, ca: str) -> None:
    context = ssl.create_default_context(cafile=ca)
    client = triton_http.InferenceServerClient(public(tls_stack), ssl=True, ssl_context=context)
    try:
        assert await client.is_model_ready("classifier")
        tensor = triton_http.InferInput("IMAGE", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([media.cat_jpeg()], dtype=np.object_))
        output = triton_http.InferRequestedOutput("PROBABILITIES", class_count=3)
        result = await client.infer("classifier", [tensor], outputs=[output])
    finally:
        await client.close()
    assert top_indices(result.as_numpy("PROBABILITIES")[0]) & set(media.CAT_CLASSES)


def test_a_plaintext_grpc_client_is_refused(tls_stack: StackConfig) -> None:
    client = triton.InferenceServerClient(public(tls_stack))
    with client, pytest.raises(InferenceServerException) as refused:
        client.is_server_ready(client_timeout=TIMEOUT_S)
    assert refused.value.status() == "StatusCode.UNAVAILABLE", refused.value


async def test_a_plaintext_http_client_is_refused(tls_stack: StackConfig) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectionError):
            await session.get(f"http://{public(tls_stack)}/v2/health/ready")


def test_a_grpc_client_trusting_another_ca_fails(tls_stack: StackConfig, other_ca: str) -> None:
    with (
        triton.InferenceServerClient(
            public(tls_stack), ssl=True, root_certificates=other_ca
        ) as client,
        pytest.raises(InferenceServerException) as refused,
    ):
        client.is_server_ready(client_timeout=TIMEOUT_S)
    assert refused.value.status() == "StatusCode.UNAVAILABLE", refused.value


async def test_an_http_client_trusting_another_ca_fails(
    tls_stack: StackConfig, other_ca: str
) -> None:
    context = ssl.create_default_context(cafile=other_ca)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(f"https://{public(tls_stack)}/v2/health/ready", ssl=context)


def check_health(address: str, credentials: grpc.ChannelCredentials) -> Any:
    with grpc.secure_channel(address, credentials) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S
        )


# In-pod (the stack's default): Envoy reaches the GPU pod's preprocess (pod_port), which calls
# its Triton (triton_grpc_port) over mTLS too; the remote placement's pool is not running. The
# control plane's xDS port (eds_port) asks for Envoy's certificate as well.
@pytest.mark.parametrize("port", ["middleman_port", "pod_port", "triton_grpc_port", "eds_port"])
def test_a_service_port_refuses_a_client_without_a_certificate(
    tls_stack: StackConfig, ca: str, port: str
) -> None:
    address = f"127.0.0.1:{getattr(tls_stack, port)}"
    # Trusting the right CA is not enough: the service asks for a client certificate.
    anonymous = grpc.ssl_channel_credentials(Path(ca).read_bytes())
    with pytest.raises(grpc.RpcError) as refused:
        check_health(address, anonymous)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    # Plaintext is refused as well.
    with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError) as plain:
        health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S
        )
    assert plain.value.code() == grpc.StatusCode.UNAVAILABLE
    # Envoy's client certificate is accepted (that is how the pipeline above answered).
    envoy = services.envoy_client_tls(tls_stack)
    assert health.serving(address, tls=envoy)
    assert (
        check_health(address, envoy.credentials()).status == health_pb2.HealthCheckResponse.SERVING
    )


def test_envoy_takes_its_configuration_over_mtls(tls_stack: StackConfig) -> None:
    """Envoy's connection to the control plane is TLS: it counts the handshakes (and the tests
    above were answered through the configuration it carried)."""
    url = f"{tls_stack.admin_url}/stats?filter=^cluster\\.xds\\.ssl\\.handshake$"
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        text = response.read().decode()
    assert text.startswith("cluster.xds.ssl.handshake: "), text
    assert int(text.split(":")[1]) >= 1, text


async def test_middlemans_rest_port_refuses_a_client_without_a_certificate(
    tls_stack: StackConfig, ca: str
) -> None:
    url = f"https://127.0.0.1:{tls_stack.middleman_rest_port}/v2/health/live"
    anonymous = ssl.create_default_context(cafile=ca)
    envoy = services.envoy_client_tls(tls_stack)
    with_cert = ssl.create_default_context(cafile=ca)
    assert envoy.cert and envoy.key
    with_cert.load_cert_chain(envoy.cert, envoy.key)
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.get(url, ssl=anonymous) as response:
                await response.read()
        async with session.get(url, ssl=with_cert) as response:
            assert response.status == 200


def demo_client(*args: str, wait_s: float = 30) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "demo_client", "classify", "--json", "--wait", str(wait_s)]
    argv += args
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_the_demo_client_classifies_over_tls_with_ca(
    tls_stack: StackConfig, ca: str, other_ca: str, protocol: str, tmp_path: Path
) -> None:
    cat = tmp_path / "cat.jpg"
    cat.write_bytes(media.cat_jpeg())
    common = ("--target", public(tls_stack), "--protocol", protocol, str(cat))
    done = demo_client(*common, "--ca", ca)
    assert done.returncode == 0, done.stderr
    [top, *_] = json.loads(done.stdout)[str(cat)]
    assert top["index"] in media.CAT_CLASSES
    for refused in ((), ("--ca", other_ca)):  # plaintext; a CA that did not sign it
        done = demo_client(*common, *refused, wait_s=1)  # never ready: no use waiting
        assert done.returncode != 0 and "UNAVAILABLE" in done.stderr, done.stderr
