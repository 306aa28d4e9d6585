"""KServe v2 over gRPC or over HTTP/REST: the client, tensors and error names of each.

Everything else in the demo client speaks to a client with the interface of tritonclient's
gRPC asyncio client (``infer(..., client_timeout=)``, ``is_server_ready``, ``is_model_ready``,
``get_model_repository_index``); :class:`HttpClient` gives tritonclient's HTTP asyncio client
that interface, so a run over REST is the same run (tensors as the binary extension).
"""

from __future__ import annotations

import asyncio
import functools
import ssl
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, TypeVar

import aiohttp
import tritonclient.grpc.aio as grpc_client
import tritonclient.http.aio as http_client
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE
from tritonclient.utils import InferenceServerException

T = TypeVar("T")

# Every gRPC channel gets its own connection (a local subchannel pool), so --channels N really
# opens N HTTP/2 connections, which Envoy can balance. Reconnect backoff is capped low: a
# stack that is still starting is retried every second, not after minutes of backoff.
CHANNEL_ARGS: list[tuple[str, Any]] = [
    ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
    ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
    ("grpc.use_local_subchannel_pool", 1),
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
# Connections one HTTP client keeps open: a request in flight needs its own (HTTP/1.1).
HTTP_CONNECTIONS = 256


async def _call(call: Awaitable[T], timeout_s: float | None) -> T:
    """``call`` within ``timeout_s``; what went wrong on the way as the gRPC client says it:
    an InferenceServerException (``TIMEOUT``, or ``UNAVAILABLE`` for a connection that failed)."""
    try:
        return await asyncio.wait_for(call, timeout_s)
    except TimeoutError:
        raise InferenceServerException(f"no answer within {timeout_s:g} s", "TIMEOUT") from None
    except (aiohttp.ClientError, OSError) as exc:
        raise InferenceServerException(str(exc) or type(exc).__name__, "UNAVAILABLE") from None


@dataclass(frozen=True)
class ClientTls:
    """TLS to the endpoint: trusting ``ca`` (a PEM file; None: the system's CAs), and for
    mutual TLS presenting ``cert`` and ``key``."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def grpc_options(self) -> dict[str, Any]:
        """tritonclient.grpc's keyword arguments (it reads the files)."""
        return {"ssl": True, "root_certificates": self.ca, "private_key": self.key,
                "certificate_chain": self.cert}  # fmt: skip

    def ssl_context(self) -> ssl.SSLContext:
        """For tritonclient.http.aio (aiohttp): verifies the server's certificate and name."""
        context = ssl.create_default_context(cafile=self.ca)
        if self.cert:
            context.load_cert_chain(self.cert, self.key)
        return context


class HttpClient:
    """tritonclient's HTTP asyncio client behind the gRPC asyncio client's interface
    (``headers`` on every call, as tritonclient's gRPC client takes them)."""

    def __init__(self, target: str, tls: ClientTls | None = None) -> None:
        secure = {} if tls is None else {"ssl": True, "ssl_context": tls.ssl_context()}
        self.client = http_client.InferenceServerClient(
            target, conn_limit=HTTP_CONNECTIONS, **secure
        )

    async def infer(
        self,
        model_name: str,
        inputs: Sequence[Any],
        outputs: Sequence[Any] | None = None,
        client_timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        # The deadline twice: the server's (Triton's ``timeout`` parameter, microseconds), and
        # this client's own, which tritonclient's HTTP client has only per session.
        timeout_us = None if client_timeout is None else int(client_timeout * 1e6)
        call = self.client.infer(
            model_name, list(inputs), outputs=outputs, timeout=timeout_us, headers=headers
        )
        return await _call(call, client_timeout)

    async def is_server_ready(
        self, client_timeout: float | None = None, headers: dict[str, str] | None = None
    ) -> bool:
        return bool(await _call(self.client.is_server_ready(headers=headers), client_timeout))

    async def is_model_ready(
        self,
        model_name: str,
        client_timeout: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> bool:
        call = self.client.is_model_ready(model_name, headers=headers)
        return bool(await _call(call, client_timeout))

    async def get_model_repository_index(
        self, client_timeout: float | None = None, headers: dict[str, str] | None = None
    ) -> Any:
        """The index as the gRPC client returns it: ``.models``, each with a ``.name``."""
        index = await _call(self.client.get_model_repository_index(headers=headers), client_timeout)
        return SimpleNamespace(models=[SimpleNamespace(**model) for model in index])

    async def close(self) -> None:
        await self.client.close()


class Authorized:
    """A client whose every call carries ``Authorization: Bearer <token>`` (an endpoint that
    requires a token: Envoy's JWT check); ``close`` as the client's."""

    def __init__(self, client: Any, token: str) -> None:
        self.client = client
        self.headers = {"authorization": f"Bearer {token}"}

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.client, name)
        return method if name == "close" else functools.partial(method, headers=self.headers)


@dataclass(frozen=True)
class Transport:
    """One of KServe v2's transports: its tensor classes and how to open a client."""

    name: str
    infer_input: type[Any]
    requested_output: type[Any]

    def open(self, target: str, tls: ClientTls | None = None, token: str | None = None) -> Any:
        """A client of ``target``; over TLS when ``tls`` is given, every call with ``token``
        when one is."""
        if self.name == "http":
            client: Any = HttpClient(target, tls)
        else:
            secure = {} if tls is None else tls.grpc_options()
            client = grpc_client.InferenceServerClient(
                url=target, channel_args=list(CHANNEL_ARGS), **secure
            )
        return client if token is None else Authorized(client, token)


GRPC = Transport("grpc", grpc_client.InferInput, grpc_client.InferRequestedOutput)
HTTP = Transport("http", http_client.InferInput, http_client.InferRequestedOutput)
TRANSPORTS = {t.name: t for t in (GRPC, HTTP)}
