"""The KServe v2 RPCs every inferline model server answers alike (liveness, readiness, identity),
and the server that serves them (:func:`serve`)."""

from __future__ import annotations

from typing import Any, ClassVar, TypeAlias

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferline import __version__
from inferline.capacity import INNER_MESSAGE_BYTES
from inferline.errors import InferError
from inferline.server import RunningServer, start_server
from inferline.tls import ServerTls

Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
SERVICE_NAME = "inference.GRPCInferenceService"  # KServe v2's, as reflection and health name it


async def serve(
    name: str,
    port: int,
    servicer: service_pb2_grpc.GRPCInferenceServiceServicer,
    host: str = "0.0.0.0",
    max_message_bytes: int = INNER_MESSAGE_BYTES,
    tls: ServerTls | None = None,
    health_port: int | None = None,
    timing_as: str | None = None,
) -> RunningServer:
    """Serve ``servicer`` as KServe v2 gRPC on ``port`` (:func:`inferline.server.start_server`)."""
    return await start_server(
        name,
        port,
        [lambda s: service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(servicer, s)],
        [SERVICE_NAME],
        host=host,
        max_message_bytes=max_message_bytes,
        tls=tls,
        health_port=health_port,
        timing_as=timing_as,
    )


class KServeServicer(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Base servicer: subclasses name their server and models, and say when they are ready."""

    server_name: ClassVar[str]
    models: tuple[str, ...]  # a class attribute, or set per instance (middleman's catalog)
    extensions: ClassVar[tuple[str, ...]] = ("model_configuration",)

    async def ready(self) -> bool:
        """Whether requests can be served now (e.g. the upstream is ready too)."""
        return True

    def serves(self, name: str, version: str) -> bool:
        return name in self.models and version in ("", "1")

    def check_model(self, name: str, version: str) -> None:
        """NOT_FOUND, naming what is served, unless ``name`` (version 1 or any) is served here."""
        if name not in self.models:
            served = ", ".join(repr(m) for m in self.models)
            raise InferError(
                grpc.StatusCode.NOT_FOUND, f"unknown model {name!r}: this server serves {served}"
            )
        if version not in ("", "1"):
            raise InferError(
                grpc.StatusCode.NOT_FOUND, f"model {name!r} has no version {version!r}; use 1"
            )

    def server_metadata(self) -> service_pb2.ServerMetadataResponse:
        return service_pb2.ServerMetadataResponse(
            name=self.server_name, version=__version__, extensions=list(self.extensions)
        )

    async def model_ready(self, name: str, version: str = "") -> bool:
        return self.serves(name, version) and await self.ready()

    async def repository_index(self) -> service_pb2.RepositoryIndexResponse:
        """Every model served here, as Triton lists its repository (all are loaded for as long
        as the server runs)."""
        state = "READY" if await self.ready() else "UNAVAILABLE"
        index = service_pb2.RepositoryIndexResponse.ModelIndex
        return service_pb2.RepositoryIndexResponse(
            models=[index(name=name, version="1", state=state) for name in self.models]
        )

    async def ServerLive(
        self, request: service_pb2.ServerLiveRequest, context: Context
    ) -> service_pb2.ServerLiveResponse:
        return service_pb2.ServerLiveResponse(live=True)

    async def ServerReady(
        self, request: service_pb2.ServerReadyRequest, context: Context
    ) -> service_pb2.ServerReadyResponse:
        return service_pb2.ServerReadyResponse(ready=await self.ready())

    async def ServerMetadata(
        self, request: service_pb2.ServerMetadataRequest, context: Context
    ) -> service_pb2.ServerMetadataResponse:
        return self.server_metadata()

    async def ModelReady(
        self, request: service_pb2.ModelReadyRequest, context: Context
    ) -> service_pb2.ModelReadyResponse:
        return service_pb2.ModelReadyResponse(
            ready=await self.model_ready(request.name, request.version)
        )

    async def RepositoryIndex(
        self, request: service_pb2.RepositoryIndexRequest, context: Context
    ) -> service_pb2.RepositoryIndexResponse:
        """:meth:`repository_index` (``ready`` ignored: all are loaded)."""
        return await self.repository_index()
