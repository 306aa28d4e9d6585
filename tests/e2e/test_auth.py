"""The stack with authentication on (INFERLINE_STACK_AUTH=true): Envoy's public listener admits
only requests carrying a token signed by the stack's key, of its issuer, for its audience, over
gRPC and REST alike; everything else is answered by Envoy itself and never reaches middleman.
Liveness and readiness stay open to probes that carry no token.

One more stack of its own, on free ports, serving the real model; the requests go through the
demo client's own clients (its --token), and Envoy's counters say what reached middleman.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import aiohttp
import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from demo_client.client import open_clients
from demo_client.transports import TRANSPORTS, Transport
from inferline_envoy import admin
from inferline_stack import auth
from inferline_stack.config import StackConfig
from inferline_testing import media
from inferline_testing.stacks import stack_fixture

pytestmark = pytest.mark.e2e

TIMEOUT_S = 10.0


# A stack of its own with auth on: one model, no Prometheus (nothing here needs it).
auth_stack = stack_fixture("auth", models="", prometheus=False, auth=True)


def signing_key(config: StackConfig) -> bytes:
    return auth.AuthFiles(config.auth_path).key.read_bytes()


def target(config: StackConfig) -> str:
    return f"127.0.0.1:{config.public_port}"


async def reached_middleman(config: StackConfig) -> int:
    """Requests Envoy has sent to middleman, gRPC and REST (health checks are not counted)."""
    stats = await admin.stats(config.admin_url, r"^cluster\.middleman(-rest)?\.upstream_rq_total$")
    return sum(int(v) for v in stats.values())


async def classify(config: StackConfig, transport: Transport, token: str | None) -> Any:
    """A cat through the demo client's client, with ``token``; the top-3 classes."""
    async with open_clients(target(config), transport=transport, token=token) as (client,):
        tensor = transport.infer_input("IMAGE", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([media.cat_jpeg()], dtype=np.object_))
        output = transport.requested_output("PROBABILITIES", class_count=3)
        result = await client.infer(
            "classifier", [tensor], outputs=[output], client_timeout=TIMEOUT_S
        )
    return {int(item.split(b":")[1]) for item in result.as_numpy("PROBABILITIES")[0]}


PROTOCOLS = sorted(TRANSPORTS)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_good_token_classifies_a_cat(auth_stack: StackConfig, protocol: str) -> None:
    token = auth.AuthFiles(auth_stack.auth_path).read_token()  # what `make token` wrote
    before = await reached_middleman(auth_stack)
    assert await classify(auth_stack, TRANSPORTS[protocol], token) & set(media.CAT_CLASSES)
    assert await reached_middleman(auth_stack) > before


HOUR = 3600.0
# A case -> how its token is made (from the stack's key and another one), and what Envoy says.
# A good token for another audience is not unauthenticated but not allowed here: 403 /
# PERMISSION_DENIED, as Envoy (and RFC 6750's insufficient_scope) answer it.
Mint = Callable[[bytes, bytes], str | None]
UNAUTHENTICATED = {"grpc": "StatusCode.UNAUTHENTICATED", "http": "401"}  # status by protocol
DENIED = {"grpc": "StatusCode.PERMISSION_DENIED", "http": "403"}
REFUSED: dict[str, tuple[Mint, str, dict[str, str]]] = {
    "no token": (lambda key, other: None, "Jwt is missing", UNAUTHENTICATED),
    "expired": (lambda key, other: auth.mint(key, now=time.time() - 2 * HOUR, lifetime_s=HOUR),
                "expired", UNAUTHENTICATED),
    "another issuer": (lambda key, other: auth.mint(key, issuer="someone-else"), "issuer",
                       UNAUTHENTICATED),
    "signed by another key": (lambda key, other: auth.mint(other), "verification fail",
                              UNAUTHENTICATED),
    "not a token": (lambda key, other: "not-a-jwt", "Jwt", UNAUTHENTICATED),
    "another audience": (lambda key, other: auth.mint(key, audience="another-api"), "Audiences",
                         DENIED),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSED))
@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_request_without_a_good_token_is_refused_by_envoy(
    auth_stack: StackConfig, protocol: str, case: str
) -> None:
    mint, says, statuses = REFUSED[case]
    token = mint(signing_key(auth_stack), auth.new_key())
    before = await reached_middleman(auth_stack)
    with pytest.raises(InferenceServerException) as refused:
        await classify(auth_stack, TRANSPORTS[protocol], token)
    status = refused.value.status()
    assert status == statuses[protocol], refused.value
    assert says in (refused.value.message() or ""), refused.value
    assert await reached_middleman(auth_stack) == before  # Envoy answered; middleman never knew


async def test_liveness_and_readiness_need_no_token(auth_stack: StackConfig) -> None:
    async with grpc.aio.insecure_channel(target(auth_stack)) as channel:
        check = health_pb2_grpc.HealthStub(channel).Check
        answer = await check(health_pb2.HealthCheckRequest(), timeout=TIMEOUT_S)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    async with open_clients(target(auth_stack)) as (client,):
        assert await client.is_server_ready(client_timeout=TIMEOUT_S)
        assert await client.is_model_ready("classifier", client_timeout=TIMEOUT_S)
    async with aiohttp.ClientSession() as session:
        for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/classifier/ready"):
            async with session.get(f"http://{target(auth_stack)}{path}") as response:
                assert response.status == 200, path
        async with session.get(f"http://{target(auth_stack)}/v2/models/classifier") as response:
            assert response.status == 401  # metadata is not readiness: it needs a token
