"""The thin gRPC layer: ``inference.GRPCInferenceService`` as a transparent proxy.

``ModelInfer`` goes through the batcher; every other RPC (readiness, metadata, config,
statistics, repository, shared memory, ``ModelStreamInfer``, ...) is forwarded to the upstream
as raw bytes, with its deadline, so the batcher answers exactly as the upstream does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeAlias

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

from batcher.batchers import Batchers
from batcher.upstream import SERVICE, Upstream
from inferline.errors import abort, from_upstream, grpc_boundary, invalid
from inferline.metrics import name_model

logger = logging.getLogger(__name__)

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
Metadata: TypeAlias = tuple[tuple[str, str | bytes], ...]

_METHODS = service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods
# Every unary method but ModelInfer; every streaming one (ModelStreamInfer).
PASS_THROUGH_UNARY = tuple(
    m.name
    for m in _METHODS
    if m.name != "ModelInfer" and not (m.client_streaming or m.server_streaming)
)
PASS_THROUGH_STREAM = tuple(m.name for m in _METHODS if m.client_streaming and m.server_streaming)

# Headers that belong to one hop (HTTP/2, gRPC framing) and must not be forwarded.
_HOP_HEADERS = frozenset({"user-agent", "te", "content-type", "host", "connection"})


def forwardable(metadata: Sequence[tuple[str, str | bytes]] | None) -> Metadata:
    """The caller's custom metadata, minus what belongs to this hop."""
    return tuple(
        (k, v)
        for k, v in metadata or ()
        if not k.startswith((":", "grpc-")) and k not in _HOP_HEADERS
    )


class BatcherService:
    def __init__(self, upstream: Upstream, batchers: Batchers, default_timeout_s: float) -> None:
        self.upstream = upstream
        self.batchers = batchers
        self.default_timeout_s = default_timeout_s

    def handler(self) -> grpc.GenericRpcHandler:
        """Raw-bytes handlers (no (de)serializers) for every method of the KServe service."""
        handlers = {"ModelInfer": grpc.unary_unary_rpc_method_handler(self.model_infer)}
        for name in PASS_THROUGH_UNARY:
            handlers[name] = grpc.unary_unary_rpc_method_handler(self._unary(name))
        for name in PASS_THROUGH_STREAM:
            handlers[name] = grpc.stream_stream_rpc_method_handler(self._stream(name))
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    @grpc_boundary
    async def model_infer(self, raw: bytes, context: Context) -> bytes:
        try:
            request = service_pb2.ModelInferRequest.FromString(raw)
        except DecodeError:
            raise invalid("ModelInfer: the request is not a valid ModelInferRequest") from None
        name_model(request.model_name)
        loop = asyncio.get_running_loop()
        remaining = context.time_remaining()
        deadline = None if remaining is None else loop.time() + remaining
        batcher = await self.batchers.get(request.model_name, request.model_version, remaining)
        return await batcher.infer(request, raw, deadline)

    def _timeout(self, context: Context) -> float:
        remaining = context.time_remaining()
        return self.default_timeout_s if remaining is None else max(remaining, 0.0)

    def _unary(self, method: str) -> Any:
        call = self.upstream.unary(method)

        async def forward(raw: bytes, context: Context) -> bytes:
            try:
                return bytes(
                    await call(
                        raw,
                        timeout=self._timeout(context),
                        metadata=forwardable(context.invocation_metadata()),
                    )
                )
            except grpc.aio.AioRpcError as exc:
                error = from_upstream(exc, self.upstream.name)
            return await abort(context, error)

        return forward

    def _stream(self, method: str) -> Any:
        call = self.upstream.stream(method)

        async def forward(requests: AsyncIterator[bytes], context: Context) -> AsyncIterator[bytes]:
            responses = call(
                requests,
                timeout=self._timeout(context),
                metadata=forwardable(context.invocation_metadata()),
            )
            try:
                async for response in responses:
                    yield response
            except grpc.aio.AioRpcError as exc:
                await abort(context, from_upstream(exc, self.upstream.name))

        return forward
