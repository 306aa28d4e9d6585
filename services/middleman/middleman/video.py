"""Model ``classifier_video``: a video in, one classified frame at a time out.

A video is a whole file (one request) or a file in chunks (:mod:`inferline.sequence`), classified
while its chunks are still arriving. Frames come from the preprocess service's
``preprocess_video`` stream (:mod:`middleman.remote_frames`), or are decoded in this process (the
same core, :mod:`inferline.imaging.video`; :mod:`middleman.frames`); each chunk of frames is one
inference call, and every frame becomes its own result as soon as its chunk is classified.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping

from inferline.errors import invalid
from middleman.budget import Budget
from middleman.classifiers import Classifier
from middleman.frames import Chunks, FrameSource, PixelChunk, ScoredChunk, Video
from middleman.outputs import ClassifiedFrame
from middleman.pipeline import Pixels, TritonUpstream

logger = logging.getLogger(__name__)


class VideoClassifier:
    """Classifies each sampled frame with ``classifier`` (the default model); frames that come
    classified already (:class:`~middleman.remote_frames.PodFrames`) are not sent for inference
    again."""

    def __init__(
        self,
        frames: FrameSource,
        upstream: TritonUpstream,
        classifier: Classifier,
        timeout: float,
    ) -> None:
        self.frames, self.upstream, self.timeout = frames, upstream, timeout
        self.classifier = classifier

    @contextlib.asynccontextmanager
    async def __call__(
        self, video: Video, parameters: Mapping[str, object], time_left: float | None
    ) -> AsyncIterator[AsyncIterator[ClassifiedFrame]]:
        """Every sampled frame, classified, in order, while the context is open; the last one
        says so. A video in chunks is read to its end when the context closes."""
        async with self.frames(video, parameters, time_left) as chunks:
            classified = self._classified(chunks, time_left)
            try:
                yield classified
            finally:
                await classified.aclose()

    async def _classified(
        self, chunks: AsyncIterator[Chunks], time_left: float | None
    ) -> AsyncGenerator[ClassifiedFrame, None]:
        # A caller's deadline bounds the whole stream; without one, each chunk's inference gets
        # the default (a long video may take longer than any one default would allow).
        budget = None if time_left is None else Budget.start(time_left, self.timeout)
        held: ClassifiedFrame | None = None  # one frame back, to mark the last one
        async for chunk in chunks:
            timeout = self.timeout if budget is None else budget.left("inference")
            if isinstance(chunk, ScoredChunk):
                probabilities = chunk.scores
            else:
                pixels = chunk.pixels if isinstance(chunk, PixelChunk) else Pixels.of(chunk.tensors)
                probabilities = await self.upstream.infer(self.classifier, pixels, timeout)
            for i in range(len(chunk)):
                if held is not None:
                    yield held
                held = ClassifiedFrame(
                    int(chunk.indices[i]), float(chunk.timestamps[i]), probabilities[i], False
                )
        if held is None:
            raise invalid("video: no frame was sampled")
        yield ClassifiedFrame(held.index, held.timestamp, held.probabilities, True)
