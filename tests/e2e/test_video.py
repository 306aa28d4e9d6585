"""classifier_video end to end through the public endpoint of each placement: a whole video in,
one streamed response per sampled frame out, classified by the real model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton_sync
import tritonclient.grpc.aio as triton
from tritonclient.utils import InferenceServerException

from inferline_testing import media

pytestmark = pytest.mark.e2e


async def classify_video(
    url: str, video: bytes, outputs: list[triton.InferRequestedOutput] | None = None, **params: Any
) -> list[triton.InferResult]:
    async def requests() -> AsyncIterator[dict[str, Any]]:
        tensor = triton.InferInput("VIDEO", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([video], dtype=np.object_))
        yield {"model_name": "classifier_video", "inputs": [tensor], "outputs": outputs,
               "parameters": params or None}  # fmt: skip

    results = []
    async with triton.InferenceServerClient(url) as client:
        async for result, error in client.stream_infer(requests()):
            assert error is None, error
            results.append(result)
    return results


async def test_one_response_per_sampled_frame_with_top_k(public_url: str) -> None:
    video = media.make_video("mpeg4_mp4")  # 30 frames at 10 fps: 3 s
    results = await classify_video(public_url, video, fps=2.0)
    assert [int(r.as_numpy("FRAME_INDEX")[0]) for r in results] == [0, 5, 10, 15, 20, 25]
    stamps = [float(r.as_numpy("TIMESTAMP")[0]) for r in results]
    np.testing.assert_allclose(stamps, [0, 0.5, 1, 1.5, 2, 2.5], atol=0.011)
    final = [r.get_response().parameters["triton_final_response"].bool_param for r in results]
    assert final == [False] * 5 + [True]
    for result in results:
        top = result.as_numpy("PROBABILITIES")
        assert top.shape == (1, 5)  # video_top_k by default
        indices = {int(item.split(b":")[1]) for item in top[0]}
        assert indices & set(media.CAT_CLASSES), top


async def test_video_outputs_and_sampling_are_the_requests_to_choose(public_url: str) -> None:
    outputs = [
        triton.InferRequestedOutput("PROBABILITIES"),
        triton.InferRequestedOutput("FRAME_INDEX"),
    ]
    results = await classify_video(public_url, media.make_video("vp9_webm"), outputs, every_n=10)
    assert [int(r.as_numpy("FRAME_INDEX")[0]) for r in results] == [0, 10, 20]
    for result in results:
        probabilities = result.as_numpy("PROBABILITIES")
        assert probabilities.shape == (1, 1000) and probabilities.dtype == np.float32
        assert int(probabilities.argmax()) in media.CAT_CLASSES
        assert result.as_numpy("TIMESTAMP") is None


async def test_a_refused_video_is_invalid_argument_naming_the_limit(public_url: str) -> None:
    # 61 tiny frames at 0.1 fps: 610 s, over the default limit (MAX_VIDEO_DURATION_S, 600 s).
    long_video = media.make_video("mpeg4_mp4", media.video_frames(61, 64, 48), fps=0.1)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await classify_video(public_url, long_video)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "video lasts 610.0 s; the limit (max_video_duration_s)" in (caught.value.details() or "")


def test_classifier_video_is_streamed_only(public_url: str) -> None:
    with triton_sync.InferenceServerClient(public_url) as client:
        assert client.is_model_ready("classifier_video")
        config = client.get_model_config("classifier_video").config
        assert config.model_transaction_policy.decoupled
        tensor = triton_sync.InferInput("VIDEO", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([b"video"], dtype=np.object_))
        with pytest.raises(InferenceServerException, match="call ModelStreamInfer"):
            client.infer("classifier_video", [tensor])
