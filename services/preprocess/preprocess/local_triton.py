"""The GPU pod's own Triton, as its preprocess calls it: models, shared memory, inference.

Triton's shared-memory protocol is restricted (``--grpc-restricted-protocol``; PyTriton does it
by default) to callers that send its access token, which only the pod's preprocess reads (a
file in the pod, re-read whenever regions are registered, since Triton may restart with a new
one). Registering is idempotent: every region of the ring is unregistered first, so what a
previous preprocess of the pod left registered (a ``kill -9``) is dropped, and a Triton that
restarted and lost them gets them back on the next request (:meth:`LocalTriton.infer`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferline import tracing
from inferline.errors import InferError, from_upstream
from inferline.server import channel_options
from preprocess.shm import SharedMemoryRing, Slot

logger = logging.getLogger(__name__)

ACCESS_HEADER = "triton-grpc-protocol-triton-access-token"  # Triton's, for the gRPC protocol
LOST_REGION = "Unable to find shared memory region"  # Triton's words for an unknown region
# A PING to the pod's Triton each second: one it leaves unanswered that long (it hangs) fails
# the calls in flight UNAVAILABLE, which Envoy retries at another pod, instead of each waiting
# out its deadline here.
KEEPALIVE_MS = 1000


@dataclass(frozen=True)
class ModelSpec:
    """What the pod needs of one of its Triton's models: the image input it fills."""

    name: str
    input: str  # the UINT8 [N, 3, H, W] input
    height: int
    width: int
    max_batch: int


class LocalTriton:
    def __init__(
        self,
        url: str,
        token_file: str,
        ring: SharedMemoryRing,
        credentials: grpc.ChannelCredentials | None = None,  # mTLS; None: plaintext
    ) -> None:
        self.url, self.token_file, self.ring = url, token_file, ring
        options = channel_options(keepalive_ms=KEEPALIVE_MS)
        # Its Triton joins a sampled batch's trace. Triton traces every request that carries a
        # traceparent, sampled or not: only a sampled one's is passed on.
        traced = tracing.client_interceptors(sampled_only=True)
        if credentials is None:
            self.channel = grpc.aio.insecure_channel(url, options=options, interceptors=traced)
        else:
            self.channel = grpc.aio.secure_channel(
                url, credentials, options=options, interceptors=traced
            )
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)
        self._specs: dict[str, ModelSpec] = {}
        self._registered = False
        self._lock = asyncio.Lock()

    def _auth(self) -> tuple[tuple[str, str], ...]:
        if not self.token_file:
            return ()
        try:
            token = Path(self.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InferError(
                grpc.StatusCode.UNAVAILABLE,
                f"cannot read Triton's access token from {self.token_file} "
                f"(INFERLINE_PREPROCESS_TRITON_TOKEN_FILE): {exc.strerror}",
            ) from None
        return ((ACCESS_HEADER, token),)

    async def ready(self, time_left: float = 2.0) -> bool:
        try:
            request = service_pb2.ServerReadyRequest()
            return bool((await self.stub.ServerReady(request, timeout=time_left)).ready)
        except grpc.aio.AioRpcError:
            return False

    async def register(self, time_left: float = 10.0) -> None:
        """(Re-)register every slot of the ring as a system shared-memory region."""
        async with self._lock:
            auth = self._auth()
            try:
                for slot in self.ring.slots:
                    await self.stub.SystemSharedMemoryUnregister(
                        service_pb2.SystemSharedMemoryUnregisterRequest(name=slot.name),
                        metadata=auth,
                        timeout=time_left,
                    )
                    await self.stub.SystemSharedMemoryRegister(
                        service_pb2.SystemSharedMemoryRegisterRequest(
                            name=slot.name, key=slot.key, offset=0, byte_size=slot.size
                        ),
                        metadata=auth,
                        timeout=time_left,
                    )
            except grpc.aio.AioRpcError as exc:
                self._registered = False
                raise from_upstream(
                    exc, f"registering shared memory with Triton at {self.url}"
                ) from None
            self._registered = True
            logger.info(
                "registered %d shared-memory regions of %d bytes with Triton at %s",
                len(self.ring.slots), self.ring.slots[0].size, self.url,
            )  # fmt: skip

    async def unregister(self, time_left: float = 2.0) -> None:
        """Drop the ring's regions at Triton (before they are unlinked); best effort."""
        if not self._registered:
            return
        try:
            auth = self._auth()
            for slot in self.ring.slots:
                await self.stub.SystemSharedMemoryUnregister(
                    service_pb2.SystemSharedMemoryUnregisterRequest(name=slot.name),
                    metadata=auth,
                    timeout=time_left,
                )
        except (grpc.aio.AioRpcError, InferError) as exc:
            logger.warning("could not unregister shared memory at %s: %s", self.url, exc)
        self._registered = False

    async def spec(self, model: str, version: str, time_left: float | None) -> ModelSpec:
        """``model``'s image input, from its configuration (asked once)."""
        if model in self._specs:
            return self._specs[model]
        try:
            response = await self.stub.ModelConfig(
                service_pb2.ModelConfigRequest(name=model, version=version), timeout=time_left
            )
        except grpc.aio.AioRpcError as exc:
            raise from_upstream(exc, f"Triton at {self.url}") from None
        config = response.config
        images = [
            i for i in config.input
            if i.data_type == 2 and len(i.dims) + (config.max_batch_size > 0) == 4  # TYPE_UINT8
        ]  # fmt: skip
        if len(images) != 1 or config.max_batch_size < 1:
            raise InferError(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"model {model!r} at Triton has no single batched UINT8 [N, 3, H, W] input to "
                "decode images into; send it tensors, not IMAGE",
            )
        _, height, width = images[0].dims
        spec = ModelSpec(model, images[0].name, int(height), int(width), config.max_batch_size)
        self._specs[model] = spec
        return spec

    async def infer(
        self, request: service_pb2.ModelInferRequest, slot: Slot, time_left: float | None
    ) -> service_pb2.ModelInferResponse:
        """``request``, whose input is in ``slot``; registers the ring first if need be, and
        again once should Triton have lost it (restarted)."""
        for attempt in (0, 1):
            if not self._registered:
                await self.register()
            try:
                return await self.stub.ModelInfer(request, timeout=time_left)
            except grpc.aio.AioRpcError as exc:
                if attempt == 0 and LOST_REGION in (exc.details() or ""):
                    logger.warning(
                        "Triton at %s lost the shared memory: registering again", self.url
                    )
                    self._registered = False
                    continue
                if exc.code() == grpc.StatusCode.NOT_FOUND and request.model_name in self._specs:
                    # It served this model a moment ago: the pod is failing (a model backend
                    # died, Triton dropped the model), not the caller; another pod can answer.
                    raise InferError(
                        grpc.StatusCode.UNAVAILABLE,
                        f"Triton at {self.url} no longer serves model {request.model_name!r} "
                        f"({exc.details()})",
                    ) from None
                raise from_upstream(exc, f"Triton at {self.url}") from None
        raise AssertionError("unreachable")

    async def close(self) -> None:
        await self.channel.close()
