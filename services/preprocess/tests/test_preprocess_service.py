"""The preprocess service over real gRPC (port 0), with the real DALI CPU pipelines."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as triton
from prometheus_client import REGISTRY, generate_latest
from tritonclient.utils import InferenceServerException

from inferline.imaging.decode import Geometry, Limits, decode_image
from inferline_testing import media
from preprocess.choice import Machine
from preprocess.config import Config

CONFIG = Config(
    port=0,
    host="127.0.0.1",
    backend="dali-cpu",
    workers=2,
    max_batch=8,
    max_image_bytes=4 * 1024 * 1024,
    max_video_bytes=2 * 1024 * 1024,
    max_video_pixels=640 * 480,
    max_video_frames=100,
    max_video_duration_s=20.0,
    video_chunk_frames=4,
    video_max_samples=50,
    video_fps=2.0,
)


MACHINE = Machine(dali=True, gpus=0)  # the server conftest.py starts: DALI installed, no GPU


async def infer(
    client: triton.InferenceServerClient,
    images: list[bytes],
    model: str = "preprocess",
    **parameters: Any,
) -> tuple[np.ndarray[Any, Any], list[str]]:
    tensor = triton.InferInput("IMAGE", [len(images)], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=np.object_))
    result = await client.infer(model, [tensor], parameters=parameters or None)
    errors = [e.decode() for e in result.as_numpy("ERRORS")]
    return result.as_numpy("TENSOR"), errors


async def stream(
    client: triton.InferenceServerClient, video: bytes, **parameters: Any
) -> list[triton.InferResult]:
    async def requests() -> AsyncIterator[dict[str, Any]]:
        tensor = triton.InferInput("VIDEO", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([video], dtype=np.object_))
        yield {"model_name": "preprocess_video", "inputs": [tensor],
               "parameters": parameters or None}  # fmt: skip

    results = []
    async for result, error in client.stream_infer(requests()):
        assert error is None, error
        results.append(result)
    return results


async def test_health_and_metadata(client: triton.InferenceServerClient) -> None:
    assert await client.is_model_ready("preprocess")
    assert await client.is_model_ready("preprocess_video")
    assert not await client.is_model_ready("classifier")
    meta = await client.get_model_metadata("preprocess")
    assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [
        ("TENSOR", "UINT8", [-1, 3, 224, 224]),
        ("ERRORS", "BYTES", [-1]),
    ]
    config = (await client.get_model_config("preprocess_video")).config
    assert config.model_transaction_policy.decoupled


async def test_one_bad_image_never_fails_its_batch_mates(
    client: triton.InferenceServerClient,
) -> None:
    cat, coffee = media.cat_jpeg(), media.encode(media.photo("coffee"))
    images = [cat, media.truncated_jpeg(), coffee, media.png_bomb(), b"\x00" * 5_000_000]
    tensors, errors = await infer(client, images)
    assert tensors.shape == (5, 3, 224, 224) and tensors.dtype == np.uint8
    assert errors[0] == errors[2] == ""
    assert "truncated JPEG" in errors[1]
    assert "12000x12000 = 144000000 pixels; the limit (max_pixels) is 40000000" in errors[3]
    assert "the limit (max_bytes) is 4194304" in errors[4]
    assert not tensors[[1, 3, 4]].any()
    reference = decode_image(cat, Geometry(), Limits()).astype(np.float32)
    assert np.abs(tensors[0].astype(np.float32) - reference).mean() < 3.0  # DALI vs OpenCV


async def test_every_format_decodes(client: triton.InferenceServerClient) -> None:
    names = sorted(media.UNUSUAL)
    tensors, errors = await infer(client, [media.UNUSUAL[n]() for n in names[:8]])
    more, more_errors = await infer(client, [media.UNUSUAL[n]() for n in names[8:]])
    assert errors + more_errors == [""] * len(names)
    luminance = np.concatenate([tensors, more]).astype(np.float32).mean(axis=1)
    reference = decode_image(media.cat_jpeg(), Geometry(), Limits()).astype(np.float32).mean(0)
    per_format = dict(zip(names, np.abs(luminance - reference).mean(axis=(1, 2)), strict=True))
    assert max(per_format.values()) < 8, per_format


@pytest.mark.parametrize(
    ("model", "name", "count", "status", "words"),
    [
        ("preprocess", "IMAGE", 9, "INVALID_ARGUMENT", "1 <= N <= 8 (max_batch)"),
        ("preprocess", "INPUT", 1, "INVALID_ARGUMENT", "expects input 'IMAGE'"),
        ("resnet", "IMAGE", 1, "NOT_FOUND", "unknown model 'resnet'"),
        ("preprocess_video", "IMAGE", 1, "INVALID_ARGUMENT", "call ModelStreamInfer"),
    ],
)
async def test_bad_requests_get_a_precise_status(
    client: triton.InferenceServerClient, model: str, name: str, count: int, status: str,
    words: str,
) -> None:  # fmt: skip
    tensor = triton.InferInput(name, [count], "BYTES")
    tensor.set_data_from_numpy(np.array([media.cat_jpeg()] * count, dtype=np.object_))
    with pytest.raises(InferenceServerException) as caught:
        await client.infer(model, [tensor])
    assert caught.value.status() == f"StatusCode.{status}"
    assert words in (caught.value.message() or "")


async def test_video_streams_sampled_frames_in_chunks(
    client: triton.InferenceServerClient,
) -> None:
    results = await stream(client, media.make_video("mpeg4_mp4"))  # 30 frames, 10 fps
    final = [r.get_response().parameters["triton_final_response"].bool_param for r in results]
    assert final == [False, False, True]  # two chunks of frames, then the empty final one
    indices = np.concatenate([r.as_numpy("FRAME_INDEX") for r in results])
    stamps = np.concatenate([r.as_numpy("TIMESTAMP") for r in results])
    tensors = np.concatenate([r.as_numpy("TENSOR") for r in results])
    assert indices.tolist() == [0, 5, 10, 15, 20, 25]  # the configured 2 fps
    np.testing.assert_allclose(stamps, indices / 10, atol=0.011)
    assert tensors.shape == (6, 3, 224, 224) and tensors.any()
    assert [len(r.as_numpy("FRAME_INDEX")) for r in results] == [4, 2, 0]


async def test_video_sampling_comes_from_the_request(client: triton.InferenceServerClient) -> None:
    results = await stream(client, media.make_video("vp9_webm"), every_n=7, max_frames=3)
    indices = np.concatenate([r.as_numpy("FRAME_INDEX") for r in results])
    assert indices.tolist() == [0, 7, 14]


def _video(frames: int, width: int = 64, height: int = 48, fps: float = 10.0) -> bytes:
    return media.make_video("mpeg4_mp4", media.video_frames(frames, width, height), fps)


@pytest.mark.parametrize(
    ("make", "params", "words"),
    [
        (lambda: b"\x00" * (2 * 1024 * 1024 + 1), {}, "the limit (max_video_bytes) is 2097152"),
        (lambda: _video(2, 800, 600), {}, "480000 pixels; the limit (max_video_pixels) is 307200"),
        (lambda: _video(101, fps=30), {}, "101 frames; the limit (max_video_frames) is 100"),
        (lambda: _video(25, fps=1), {}, "25.0 s; the limit (max_video_duration_s) is 20"),
        (lambda: b"GIF89a not a video", {}, "not a recognised video"),
        (lambda: _video(5), {"max_frames": 51}, "above this server's cap (50)"),
        (lambda: _video(5), {"fps": 1.0, "every_n": 2}, "exactly one of every_n and fps"),
    ],
)
async def test_refused_videos_end_the_stream_with_invalid_argument(
    client: triton.InferenceServerClient, make: Any, params: dict[str, Any], words: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stream(client, make(), **params)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in (caught.value.details() or ""), caught.value.details()


async def test_metrics_are_labelled_by_backend(client: triton.InferenceServerClient) -> None:
    await infer(client, [media.cat_jpeg(), b"junk"])
    text = generate_latest(REGISTRY).decode()
    for line in [
        'inferline_preprocess_backend_info{backend="dali-cpu",media="image"} 1.0',
        'inferline_preprocess_backend_info{backend="opencv",media="video"} 1.0',
        'inferline_preprocess_images_total{backend="dali-cpu"}',
        'inferline_preprocess_errors_total{backend="dali-cpu",kind="unrecognised",media="image"}',
        'inferline_preprocess_input_bytes_total{backend="dali-cpu",media="image"}',
        'inferline_preprocess_output_bytes_total{backend="dali-cpu",media="image"}',
        'inferline_preprocess_decode_duration_seconds_count{backend="dali-cpu",media="image"}',
    ]:
        assert line in text, line


async def test_a_request_names_its_models_geometry(client: triton.InferenceServerClient) -> None:
    cat = media.cat_jpeg()
    tensors, errors = await infer(client, [cat, cat], resize=292, crop=260)
    assert tensors.shape == (2, 3, 260, 260) and errors == ["", ""]
    reference = decode_image(cat, Geometry(292, 260), Limits()).astype(np.float32)
    assert np.abs(tensors[0].astype(np.float32) - reference).mean() < 3.0  # DALI vs OpenCV
    default, _ = await infer(client, [cat])  # the configured geometry is still there
    assert default.shape == (1, 3, 224, 224)


async def test_video_frames_come_at_the_requested_geometry(
    client: triton.InferenceServerClient,
) -> None:
    results = await stream(client, media.make_video("mpeg4_mp4"), crop=160, resize=180)
    shapes = {r.as_numpy("TENSOR").shape[1:] for r in results}
    assert shapes == {(3, 160, 160)}


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"resize": 200, "crop": 224}, "geometry: crop (224) must be positive and <= resize (200)"),
        ({"crop": "big"}, "geometry: parameter 'crop' must be an integer, got 'big'"),
        ({"crop": 2000}, "geometry: crop must be between 1 and 1024, got 2000"),
    ],
)
async def test_a_bad_geometry_is_invalid_argument(
    client: triton.InferenceServerClient, parameters: dict[str, Any], message: str
) -> None:
    with pytest.raises(InferenceServerException) as caught:
        await infer(client, [media.cat_jpeg()], **parameters)
    assert caught.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert caught.value.message() == message
