"""A video in chunks over one ``ModelStreamInfer`` stream: the sequence protocol, checked.

Each request of a video in chunks carries the next consecutive byte range of the file and the
request parameters that KServe and Triton clients already send for a stateful stream
(``tritonclient``'s ``sequence_id``, ``sequence_start`` and ``sequence_end`` arguments):

* ``sequence_id`` (int64, not 0, or a non-empty string) on every chunk, the same throughout;
* ``sequence_start`` true on the first chunk only, ``sequence_end`` true on the last (a video in
  one chunk has both);
* the first chunk may state the whole file's length (parameter ``video_bytes``, int64): FFmpeg
  needs it to start an mp4 before its last byte arrives.

A request without these parameters is a whole video, as before. One stream carries one video at
a time, and may carry another after it. What breaks the protocol is INVALID_ARGUMENT saying
what to send instead: a chunk with no open sequence, a second ``sequence_start`` while one is
open, another ``sequence_id`` mid-sequence, or the stream ending before ``sequence_end``
(:class:`IncompleteSequence`, which a server that needed no more of the video may ignore).

:func:`spooled` spools a video's chunks (:func:`inferline.imaging.upload.spooling`) while its
caller decodes it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TypeAlias

import grpc
from tritonclient.grpc import service_pb2

from inferline.errors import InferError, invalid
from inferline.imaging.upload import Spool, spooling

SEQUENCE_PARAMETERS = ("sequence_id", "sequence_start", "sequence_end")
SIZE_PARAMETER = "video_bytes"

Request: TypeAlias = service_pb2.ModelInferRequest
SequenceId: TypeAlias = int | str


@dataclass(frozen=True)
class Flags:
    """A request's sequence parameters."""

    id: SequenceId
    start: bool
    end: bool


@dataclass(frozen=True)
class Chunk:
    """The next consecutive bytes of a video; ``last`` on the chunk that ends it."""

    data: bytes
    last: bool


@dataclass(frozen=True)
class ChunkedVideo:
    """A video arriving in chunks: its sequence, the length its sender stated (or None), and its
    chunks in order. Iterating ``chunks`` reads the stream's requests and checks the protocol."""

    id: SequenceId
    size: int | None
    chunks: AsyncIterator[Chunk]


class IncompleteSequence(InferError):
    """The stream ended before the chunk with ``sequence_end``."""


def flags(request: Request) -> Flags | None:
    """``request``'s sequence parameters; None when it has none (a whole video)."""
    params = request.parameters
    if not any(name in params for name in SEQUENCE_PARAMETERS):
        return None
    sequence_id: SequenceId = 0
    if "sequence_id" in params:
        param = params["sequence_id"]
        kind = param.WhichOneof("parameter_choice")
        if kind in ("int64_param", "uint64_param", "string_param"):
            sequence_id = getattr(param, kind)
    if sequence_id in (0, ""):
        raise invalid(
            "sequence_start and sequence_end need a sequence_id (int64, not 0, or a non-empty "
            "string) on every chunk of a video in chunks"
        )
    return Flags(sequence_id, _bool(request, "sequence_start"), _bool(request, "sequence_end"))


def _bool(request: Request, name: str) -> bool:
    if name not in request.parameters:
        return False
    param = request.parameters[name]
    if param.WhichOneof("parameter_choice") != "bool_param":
        raise invalid(f"parameter {name!r} must be a bool")
    return bool(param.bool_param)


def stated_size(request: Request) -> int | None:
    """The whole file's length that the first chunk states (``video_bytes``), or None."""
    if SIZE_PARAMETER not in request.parameters:
        return None
    param = request.parameters[SIZE_PARAMETER]
    kind = param.WhichOneof("parameter_choice")
    value = getattr(param, kind) if kind in ("int64_param", "uint64_param") else -1
    if value < 0:
        raise invalid(f"parameter {SIZE_PARAMETER!r} must be the file's length in bytes (int64)")
    return int(value)


def chunked(
    first: Request, requests: AsyncIterator[Request], read: Callable[[Request], bytes]
) -> ChunkedVideo | None:
    """The video in chunks that ``first`` starts, its later chunks read from ``requests``
    (exactly up to the one with ``sequence_end``, so the stream can go on after it); None when
    ``first`` is a whole video. ``read`` checks a request and returns its bytes (raising
    InferError). Raises INVALID_ARGUMENT when ``first`` does not start a sequence."""
    opened = flags(first)
    if opened is None:
        return None
    if not opened.start:
        raise invalid(
            f"a chunk of sequence {opened.id!r} with no sequence open: the first chunk of a "
            "video must set sequence_start=true"
        )
    size = stated_size(first)
    return ChunkedVideo(opened.id, size, _chunks(opened, read(first), requests, read))


async def _chunks(
    opened: Flags, data: bytes, requests: AsyncIterator[Request], read: Callable[[Request], bytes]
) -> AsyncIterator[Chunk]:
    name = f"sequence {opened.id!r}"
    yield Chunk(data, opened.end)
    count, received, end = 1, len(data), opened.end
    while not end:
        try:
            request = await anext(requests)
        except StopAsyncIteration:
            raise IncompleteSequence(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the stream ended inside {name} after {count} chunk(s), {received} bytes: "
                "its last chunk must set sequence_end=true",
            ) from None
        chunk = flags(request)
        if chunk is None:
            raise invalid(
                f"chunk {count} of {name} has no sequence parameters: every chunk of a video "
                "in chunks carries sequence_id, and the last one sequence_end=true"
            )
        if chunk.start:
            raise invalid(
                f"sequence_start while {name} is still open (chunk {count}): a stream uploads "
                "one video at a time; end this one with sequence_end=true first"
            )
        if chunk.id != opened.id:
            raise invalid(
                f"sequence_id {chunk.id!r} while {name} is open (chunk {count}): a stream "
                "uploads one video at a time; end this one with sequence_end=true first"
            )
        data = read(request)
        count, received, end = count + 1, received + len(data), chunk.end
        yield Chunk(data, end)


async def data(video: ChunkedVideo) -> AsyncIterator[bytes]:
    """The bytes of ``video``'s chunks, in order."""
    async for chunk in video.chunks:
        yield chunk.data


@contextlib.asynccontextmanager
async def spooled(video: ChunkedVideo, max_bytes: int) -> AsyncIterator[Spool]:
    """``video`` spooled to disk (at most ``max_bytes``) as it arrives, while the body decodes
    it. When the body is done, the rest of the sequence is read, checked and dropped, so the
    stream can carry another video; a stream that ends before ``sequence_end`` is fine then,
    since nothing more was needed. The disk failing (full, or no TMPDIR) is RESOURCE_EXHAUSTED,
    saying where. Raises DecodeError when the length the sender stated is over ``max_bytes``."""
    try:
        async with spooling(
            data(video), max_bytes, video.size, unneeded=(IncompleteSequence,)
        ) as spool:
            yield spool
    except OSError as exc:
        raise InferError(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"video: cannot spool the upload to a temporary file (TMPDIR): {exc}",
        ) from None
