"""The upstream KServe v2 server (Triton, or Envoy in front of several), spoken to in raw bytes.

Requests and responses cross this hop as the bytes they arrived in: the batcher parses what it
must read and never re-encodes what it only forwards. gRPC errors become ``InferError`` here,
once, keeping the upstream's status and naming the upstream.
"""

from __future__ import annotations

import time
from typing import Any

import grpc
from prometheus_client import Counter
from tritonclient.grpc import service_pb2

from inferline import dial, retry, timing
from inferline.errors import from_upstream

SERVICE = "inference.GRPCInferenceService"


def method_path(method: str) -> str:
    return f"/{SERVICE}/{method}"


RETRIES = Counter(
    "inferline_batcher_upstream_retries_total",
    "The upstream dialled proxyless: batches retried on another replica (a replica went away), "
    "and retries its budget refused",
    ["outcome"],
)


class Upstream:
    def __init__(self, url: str, max_message_bytes: int) -> None:
        self.url = url
        self.name = f"upstream {url}"
        self.channel = dial.channel(url, max_message_bytes)
        self.budget = dial.retry_budget(url)
        self._infer = self.channel.unary_unary(method_path("ModelInfer"))
        self._config = self.channel.unary_unary(
            method_path("ModelConfig"),
            request_serializer=service_pb2.ModelConfigRequest.SerializeToString,
            response_deserializer=service_pb2.ModelConfigResponse.FromString,
        )

    async def infer(self, request: bytes, time_left: float) -> bytes:
        """One ModelInfer call (serialized request in, serialized response out); a failure
        raises InferError with the upstream's status. Retried here only when the pool is dialled
        proxyless; otherwise Envoy's hop in front of it retries (one layer retries)."""
        deadline = time.monotonic() + time_left

        async def attempt() -> bytes:
            call = self._infer(request, timeout=max(0.0, deadline - time.monotonic()))
            answer = bytes(await call)
            if timing.active():  # the GPU pod's decode and infer
                timing.absorb(await call.trailing_metadata())
            return answer

        try:
            return await retry.retried(
                self.budget, attempt, lambda outcome: RETRIES.labels(outcome).inc()
            )
        except grpc.aio.AioRpcError as exc:
            raise from_upstream(exc, self.name) from None

    async def max_batch_size(self, model: str, version: str, time_left: float) -> int:
        """``max_batch_size`` of the upstream's config of ``model`` (0: it does not batch)."""
        request = service_pb2.ModelConfigRequest(name=model, version=version)
        try:
            response = await self._config(request, timeout=time_left)
        except grpc.aio.AioRpcError as exc:
            raise from_upstream(exc, f"{self.name} (model config of {model!r})") from None
        return int(response.config.max_batch_size)

    def unary(self, method: str) -> Any:
        """A raw-bytes unary callable for ``method`` of the KServe service."""
        return self.channel.unary_unary(method_path(method))

    def stream(self, method: str) -> Any:
        """A raw-bytes bidirectional-streaming callable for ``method``."""
        return self.channel.stream_stream(method_path(method))

    async def close(self) -> None:
        await self.channel.close()
