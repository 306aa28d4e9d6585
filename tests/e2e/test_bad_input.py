"""Bad input through the public endpoint: a precise status, a useful message, nothing else hurt."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as triton
import tritonclient.grpc.aio as triton_aio
from tritonclient.utils import InferenceServerException

from inferline import capacity
from inferline_testing import media

pytestmark = pytest.mark.e2e

INVALID = "StatusCode.INVALID_ARGUMENT"

BAD_IMAGES: dict[str, tuple[Callable[[], bytes], str, str]] = {
    "empty": (lambda: b"", INVALID, "empty image"),
    "random": (lambda: np.random.default_rng(1).bytes(4096), INVALID, "not a recognised image"),
    "text": (lambda: b"hello, I am not a picture\n" * 10, INVALID, "not a recognised image"),
    "truncated_jpeg": (media.truncated_jpeg, INVALID, "truncated JPEG"),
    "huge_header_jpeg": (media.huge_header_jpeg, INVALID, "65000x65000"),
    "png_bomb": (media.png_bomb, INVALID, "max_pixels"),
    "huge_header_webp": (media.huge_header_webp, INVALID, "16384x16384"),
    "huge_progressive_jpeg": (
        lambda: media.huge_header_jpeg(16320, 12240, progressive=True),
        INVALID,
        "progressive JPEG header claims 16320x12240",
    ),
    "over_image_limit": (
        lambda: b"\xff\xd8" + bytes(capacity.MAX_IMAGE_BYTES),
        INVALID,
        "max_bytes",
    ),
}


def infer(url: str, images: list[bytes], name: str = "IMAGE", datatype: str = "BYTES",
          model: str = "classifier") -> npt.NDArray[Any]:  # fmt: skip
    with triton.InferenceServerClient(url) as client:
        tensor = triton.InferInput(name, [len(images)], datatype)
        if datatype == "BYTES":
            tensor.set_data_from_numpy(np.array(images, dtype=np.object_))
        else:
            tensor.set_data_from_numpy(np.zeros(len(images), dtype=np.uint8))
        return np.asarray(client.infer(model, [tensor]).as_numpy("PROBABILITIES"))


def expect_error(call: Callable[[], object], status: str, words: str) -> None:
    with pytest.raises(InferenceServerException) as caught:
        call()
    assert caught.value.status() == status, caught.value
    assert words in caught.value.message(), caught.value.message()


@pytest.mark.parametrize("name", sorted(BAD_IMAGES))
def test_bad_image_gets_a_precise_status(public_url: str, name: str) -> None:
    make, status, words = BAD_IMAGES[name]
    expect_error(lambda: infer(public_url, [media.cat_jpeg(), make()]), status, words)
    # The message says which image of the request was bad.
    expect_error(lambda: infer(public_url, [media.cat_jpeg(), make()]), status, "image 1")


def test_unknown_model_is_not_found(public_url: str) -> None:
    expect_error(
        lambda: infer(public_url, [media.cat_jpeg()], model="resnet"),
        "StatusCode.NOT_FOUND",
        "unknown model 'resnet'",
    )


def test_wrong_input_name_and_datatype(public_url: str) -> None:
    expect_error(
        lambda: infer(public_url, [media.cat_jpeg()], name="INPUT"),
        INVALID,
        "expects input 'IMAGE'",
    )
    expect_error(
        lambda: infer(public_url, [media.cat_jpeg()], datatype="UINT8"),
        INVALID,
        "must be BYTES",
    )


def test_request_over_the_message_limit_is_resource_exhausted(public_url: str) -> None:
    images = [b"\xff\xd8" + b"\x00" * (12 * 1024 * 1024)] * 6  # 72 MiB > 64 MiB
    expect_error(lambda: infer(public_url, images), "StatusCode.RESOURCE_EXHAUSTED", "larger than")


async def test_good_requests_succeed_alongside_bad_ones(public_url: str) -> None:
    async with triton_aio.InferenceServerClient(public_url) as client:

        async def send(data: bytes) -> str:
            tensor = triton_aio.InferInput("IMAGE", [1], "BYTES")
            tensor.set_data_from_numpy(np.array([data], dtype=np.object_))
            try:
                await client.infer("classifier", [tensor])
            except InferenceServerException as exc:
                return str(exc.status())
            return "OK"

        bad = [make() for make, _, _ in BAD_IMAGES.values()]
        results = await asyncio.gather(*(send(d) for d in [media.cat_jpeg()] * 8 + bad))
        assert results[:8] == ["OK"] * 8
        assert all(r == INVALID for r in results[8:]), results
        assert await client.is_server_ready()

    with grpc.insecure_channel(public_url) as channel:
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
