"""DALI's video graph (what dali-gpu runs), on DALI's CPU decoder, against the CPU reader."""

from __future__ import annotations

import numpy as np
import pytest

from inferline.imaging.decode import Geometry, Limits
from inferline.imaging.streaming import VideoReader
from inferline.imaging.video import FrameChunk, Sampling, VideoLimits
from inferline_testing import media
from preprocess.backends import BackendSettings
from preprocess.dali import DaliVideoBackend
from preprocess.opencv import CpuVideoBackend

GEOMETRY = Geometry()
EVERY_5 = Sampling(every_n=5, fps=0, max_samples=100)


def _read(reader: VideoReader) -> FrameChunk:
    chunks = []
    while (chunk := reader.read_chunk()) is not None:
        chunks.append(chunk)
    reader.close()
    return FrameChunk(
        np.concatenate([c.indices for c in chunks]),
        np.concatenate([c.timestamps for c in chunks]),
        np.concatenate([c.tensors for c in chunks]),
    )


@pytest.mark.parametrize("sequence", [4, 5])  # 30 frames: a short last run, or none
def test_dali_video_streaming_agrees_with_opencv(sequence: int) -> None:
    # The graph dali-gpu runs (inputs.video streaming + ROI resize), here on DALI's CPU
    # decoder, which reads VP9 (H.264/H.265 need the GPU's NVDEC).
    settings = BackendSettings(GEOMETRY, Limits(), VideoLimits(), workers=1, max_batch=1,
                               gpu_pipelines=1, video_chunk=sequence)  # fmt: skip
    cpu = CpuVideoBackend(GEOMETRY, VideoLimits(), chunk=sequence)
    dali = DaliVideoBackend(settings, cpu, device="cpu")
    data = media.make_video("vp9_webm")  # OpenCV writes VP9 itself
    first = dali.open(data, EVERY_5)
    assert first.backend == "dali-cpu"
    ours = _read(first)
    assert ours.indices.tolist() == [0, 5, 10, 15, 20, 25]
    np.testing.assert_allclose(ours.timestamps, ours.indices / 10)
    theirs = _read(cpu.open(data, EVERY_5))
    assert np.abs(ours.tensors.astype(np.float32) - theirs.tensors).mean() < 3.0
    # The one pipeline, reused: a video abandoned half-way leaves nothing behind for the next.
    abandoned = dali.open(data, Sampling(every_n=1, fps=0))
    assert abandoned.read_chunk() is not None
    abandoned.close()
    again = _read(dali.open(data, EVERY_5))
    np.testing.assert_array_equal(again.tensors, ours.tensors)
