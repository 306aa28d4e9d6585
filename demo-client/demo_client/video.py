"""A video file streamed in chunks through ``classifier_video``: each sampled frame's top label
as soon as the server has classified it, while the upload goes on.

The file is read from disk a chunk at a time and sent over one ``ModelStreamInfer`` stream with
the sequence parameters Triton's clients send for stateful streams (``sequence_id``,
``sequence_start`` on the first chunk, ``sequence_end`` on the last); the first chunk also
states the file's length (``video_bytes``, which lets an mp4 whose index comes first start
before its end) and the sampling asked for. gRPC's flow control paces the upload to the
server's decoding, so memory holds a chunk or two whatever the file's size.

:class:`VideoStream` is the API the terminal view uses (and a web view can): iterate it for one
:class:`FrameLabel` per classified frame; ``bytes_sent`` tells the upload's progress meanwhile.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

import grpc
import numpy as np
from tritonclient.grpc.aio import InferInput, InferRequestedOutput
from tritonclient.utils import InferenceServerException

from demo_client.classify import parse_entry

VIDEO_MODEL = "classifier_video"
DEFAULT_CHUNK_BYTES = 1024 * 1024
OUTPUTS = ("FRAME_INDEX", "TIMESTAMP", "PROBABILITIES")


@dataclass(frozen=True)
class FrameLabel:
    """One sampled frame, classified: where it is in the video, its top class, and how far the
    upload was when its answer arrived."""

    index: int  # the frame's number in the video
    timestamp_s: float  # its time in the video
    label: str  # the top class's label ("class N" when the server sent none)
    score: float
    class_index: int
    bytes_sent: int  # of the file, handed to gRPC when this answer arrived
    total_bytes: int
    elapsed_s: float  # since the stream started
    last: bool  # the video's last sampled frame

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Sampling:
    """Which frames the server classifies: ``fps`` a second, or every ``every_n``-th; at most
    ``max_frames``. Unset: the server's defaults."""

    fps: float | None = None
    every_n: int | None = None
    max_frames: int | None = None

    def parameters(self) -> dict[str, Any]:
        values = {"fps": self.fps, "every_n": self.every_n, "max_frames": self.max_frames}
        return {name: value for name, value in values.items() if value is not None}


class VideoStream:
    """One video file streamed through ``model`` (iterate it once).

    ``bytes_sent``, ``chunks_sent`` and ``upload_s`` (once the last chunk has gone) follow the
    upload; a refusal or a broken stream raises InferenceServerException, whose status says why.
    """

    def __init__(
        self,
        client: Any,
        path: Path,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        sampling: Sampling | None = None,
        model: str = VIDEO_MODEL,
        timeout_s: float | None = None,
    ) -> None:
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be at least 1, not {chunk_bytes}")
        self.client, self.path, self.chunk_bytes, self.model = client, path, chunk_bytes, model
        self.sampling = sampling or Sampling()
        self.timeout_s = timeout_s
        self.total_bytes = path.stat().st_size  # OSError for a missing file, at once
        self.bytes_sent = self.chunks_sent = 0
        self.upload_s: float | None = None
        self.sequence_id = random.getrandbits(62) + 1  # not 0: 0 means "no sequence"
        self._start = 0.0
        self._answered = asyncio.Event()  # the final frame came, or the stream ended

    def __aiter__(self) -> AsyncIterator[FrameLabel]:
        return self._frames()

    @property
    def elapsed_s(self) -> float:
        return time.perf_counter() - self._start if self._start else 0.0

    async def _frames(self) -> AsyncIterator[FrameLabel]:
        self._start = time.perf_counter()
        file = await asyncio.to_thread(self.path.open, "rb")
        with file:
            stream = self.client.stream_infer(self._requests(file), stream_timeout=self.timeout_s)
            try:
                async for result, error in stream:  # to its end: the server's, after ours
                    if error is not None:
                        raise error
                    frame = self._frame(result)
                    if frame.last:
                        self._answered.set()
                    yield frame
            except grpc.aio.AioRpcError as exc:
                raise InferenceServerException(
                    msg=exc.details() or "", status=str(exc.code())
                ) from None
            finally:
                self._answered.set()
                stream.cancel()

    async def _requests(self, file: BinaryIO) -> AsyncIterator[dict[str, Any]]:
        first, sent = True, 0
        while True:
            data = await asyncio.to_thread(file.read, self.chunk_bytes)
            last = sent + len(data) >= self.total_bytes
            tensor = InferInput("VIDEO", [1], "BYTES")
            tensor.set_data_from_numpy(np.array([data], dtype=np.object_))
            parameters = None
            if first:
                parameters = {"video_bytes": self.total_bytes, **self.sampling.parameters()}
            yield {
                "model_name": self.model,
                "inputs": [tensor],
                "outputs": [
                    InferRequestedOutput("FRAME_INDEX"),
                    InferRequestedOutput("TIMESTAMP"),
                    InferRequestedOutput("PROBABILITIES", class_count=1),
                ],
                "sequence_id": self.sequence_id,
                "sequence_start": first,
                "sequence_end": last,
                "parameters": parameters,
            }
            first, sent = False, sent + len(data)
            self.bytes_sent, self.chunks_sent = sent, self.chunks_sent + 1
            if last:
                break
        self.upload_s = self.elapsed_s
        # Half-close once the answers are in: a refusal that comes with the last chunk is then
        # the server's status, not grpc's report of a half-close that raced with it.
        await self._answered.wait()

    def _frame(self, result: Any) -> FrameLabel:
        indices, stamps = result.as_numpy("FRAME_INDEX"), result.as_numpy("TIMESTAMP")
        top = result.as_numpy("PROBABILITIES")
        if indices is None or stamps is None or top is None or top.size < 1:
            raise InferenceServerException(
                msg=f"a response without {', '.join(OUTPUTS)}", status="CLIENT_ERROR"
            )
        best = parse_entry(top.ravel()[0])
        final = result.get_response().parameters.get("triton_final_response")
        return FrameLabel(
            index=int(indices.ravel()[0]),
            timestamp_s=float(stamps.ravel()[0]),
            label=best.label or f"class {best.index}",
            score=best.score,
            class_index=best.index,
            bytes_sent=self.bytes_sent,
            total_bytes=self.total_bytes,
            elapsed_s=self.elapsed_s,
            last=bool(final is not None and final.bool_param),
        )


@dataclass(frozen=True)
class VideoSummary:
    """What one video's stream did, for a summary table or a JSON object."""

    file: str
    bytes: int
    chunk_bytes: int
    chunks: int
    frames: list[FrameLabel]
    first_result_s: float | None  # since the stream started
    upload_s: float | None  # until the last chunk was handed to gRPC
    duration_s: float
    complete: bool  # the final frame came

    @property
    def frames_per_s(self) -> float:
        return len(self.frames) / self.duration_s if self.duration_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["frames"] = [
            {k: v for k, v in frame.to_dict().items() if k not in ("total_bytes", "last")}
            for frame in self.frames
        ]
        values["frames_classified"] = len(self.frames)
        values["frames_per_s"] = round(self.frames_per_s, 3)
        return values


def summarize(stream: VideoStream, frames: list[FrameLabel]) -> VideoSummary:
    return VideoSummary(
        file=str(stream.path),
        bytes=stream.total_bytes,
        chunk_bytes=stream.chunk_bytes,
        chunks=stream.chunks_sent,
        frames=list(frames),
        first_result_s=frames[0].elapsed_s if frames else None,
        upload_s=stream.upload_s,
        duration_s=stream.elapsed_s,
        complete=bool(frames) and frames[-1].last,
    )
