"""One exception type for the whole pipeline, translated to a gRPC status once, at the boundary."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
from tritonclient.utils import InferenceServerException

# Trailing metadata on every error a service answers (its own, or one it passes up): what a
# proxyless client must not retry. gRPC's own UNAVAILABLE for a replica that went away (a
# reset, a refused connection or stream) carries none (inferline.retry).
ANSWERED = "inferline-answered"


class InferError(Exception):
    """A request failed with a specific gRPC status and a message a person can act on."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"InferError({self.code.name}, {self.message!r})"


def invalid(message: str) -> InferError:
    return InferError(grpc.StatusCode.INVALID_ARGUMENT, message)


def from_upstream(exc: InferenceServerException | grpc.RpcError, upstream: str) -> InferError:
    """Translate an error from a downstream hop, keeping its status and naming the hop."""
    if isinstance(exc, grpc.RpcError):
        code = exc.code() if isinstance(exc, grpc.aio.AioRpcError | grpc.Call) else None
        detail = exc.details() if isinstance(exc, grpc.aio.AioRpcError | grpc.Call) else str(exc)
        return InferError(code or grpc.StatusCode.UNKNOWN, f"{upstream}: {detail}")
    status = exc.status() or ""
    code = getattr(grpc.StatusCode, status.removeprefix("StatusCode."), grpc.StatusCode.UNKNOWN)
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    return InferError(code, f"{upstream}: {exc.message()}")


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


async def abort(context: grpc.aio.ServicerContext[Any, Any], error: InferError) -> NoReturn:
    """End the call with ``error``'s status, marked as this service's answer (:data:`ANSWERED`)."""
    await context.abort(error.code, error.message, trailing_metadata=((ANSWERED, "1"),))
    raise error  # not reached: abort raises


def grpc_boundary(method: F) -> F:
    """Decorate a servicer method: an InferError becomes its gRPC status, nothing else leaks."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        try:
            return await method(self, request, context)
        except InferError as exc:
            await abort(context, exc)

    return wrapper  # type: ignore[return-value]


S = TypeVar("S", bound=Callable[..., AsyncIterator[Any]])


def grpc_stream_boundary(method: S) -> S:
    """:func:`grpc_boundary` for a streaming method (an async generator): an InferError ends
    the stream with its status; the responses already sent stay sent."""

    @functools.wraps(method)
    async def wrapper(
        self: Any, requests: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        try:
            async for response in method(self, requests, context):
                yield response
        except InferError as exc:
            await abort(context, exc)

    return wrapper  # type: ignore[return-value]
