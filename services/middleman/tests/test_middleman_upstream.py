"""The two hops middleman calls, against real gRPC servers: a failure upstream keeps its status
and its message names the hop (``inference at host:port``, ``preprocess at host:port``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

import grpc
import numpy as np
import pytest

from inferline import kserve
from inferline.errors import InferError
from inferline.imaging.decode import Limits
from inferline_testing.ports import free_port
from middleman.pipeline import Pixels, RemotePreprocessor, TritonUpstream

from .conftest import (
    CLASSES,
    CLASSIFIER,
    CROP,
    GEOMETRY,
    REFUSAL,
    REFUSED,
    TRITON_MODEL,
    Fake,
    carries_deadline,
)

CODES = [
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.INTERNAL,
]
LIMITS = Limits(max_bytes=1024, max_pixels=40_000_000)


def batch(n: int = 2) -> Pixels:
    return Pixels.of(np.zeros((n, 3, CROP, CROP), np.uint8))


async def failure(call: Callable[[], Awaitable[object]]) -> InferError:
    with pytest.raises(InferError) as caught:
        await call()
    return caught.value


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
async def test_an_inference_failure_keeps_its_status_and_names_the_hop(
    fake_triton: Fake, code: grpc.StatusCode
) -> None:
    upstream = TritonUpstream(fake_triton.url)
    try:
        fake_triton.servicer.failures.append(code)
        error = await failure(lambda: upstream.infer(CLASSIFIER, batch(), 5.0))
        assert error.code == code
        assert error.message == f"inference at {fake_triton.url}: fake upstream says {code.name}"
    finally:
        await upstream.close()


async def test_inference_sends_its_timeout_as_the_calls_deadline(fake_triton: Fake) -> None:
    upstream = TritonUpstream(fake_triton.url)
    try:
        probabilities = await upstream.infer(CLASSIFIER, batch(3), 2.5)
        np.testing.assert_array_equal(
            probabilities, np.tile(fake_triton.servicer.probabilities, (3, 1))
        )
        (time_left,) = fake_triton.servicer.time_left
        assert carries_deadline(time_left, 2.5)
    finally:
        await upstream.close()


async def test_an_answer_without_the_output_is_internal_naming_the_hop(fake_triton: Fake) -> None:
    upstream = TritonUpstream(fake_triton.url)
    logits = replace(CLASSIFIER, output="LOGITS")
    try:
        error = await failure(lambda: upstream.infer(logits, batch(), 5.0))
        assert error.code == grpc.StatusCode.INTERNAL
        assert error.message == (
            f"inference at {fake_triton.url} returned no 'LOGITS' of {TRITON_MODEL!r} for the batch"
        )
    finally:
        await upstream.close()


async def test_an_answer_of_another_width_than_the_labels_is_internal(fake_triton: Fake) -> None:
    upstream = TritonUpstream(fake_triton.url)
    ten_labels = replace(CLASSIFIER, labels=tuple(map(str, range(10))))
    try:
        error = await failure(lambda: upstream.infer(ten_labels, batch(), 5.0))
        assert error.code == grpc.StatusCode.INTERNAL
        assert error.message == (
            f"inference at {fake_triton.url}: {TRITON_MODEL!r} returned [2, {CLASSES}], "
            "expected [2, 10] (one score per label)"
        )
    finally:
        await upstream.close()


async def test_an_unreachable_upstream_is_unavailable_naming_the_hop() -> None:
    url = f"127.0.0.1:{free_port()}"  # nothing listens there
    upstream = TritonUpstream(url)
    try:
        assert not await upstream.ready([TRITON_MODEL], time_left=0.5)
        error = await failure(lambda: upstream.infer(CLASSIFIER, batch(), 0.5))
        assert error.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        assert error.message.startswith(f"inference at {url}: ")
    finally:
        await upstream.close()


@pytest.mark.parametrize("code", CODES, ids=lambda c: c.name)
async def test_a_preprocess_failure_keeps_its_status_and_names_the_hop(
    fake_preprocess: Fake, code: grpc.StatusCode
) -> None:
    preprocess = RemotePreprocessor(fake_preprocess.url, LIMITS)
    try:
        fake_preprocess.servicer.failures.append(code)
        error = await failure(lambda: preprocess([b"image"], GEOMETRY, 5.0))
        assert error.code == code
        assert error.message == (
            f"preprocess at {fake_preprocess.url}: fake upstream says {code.name}"
        )
    finally:
        await preprocess.close()


async def test_preprocess_gets_its_deadline_and_returns_the_batch(fake_preprocess: Fake) -> None:
    preprocess = RemotePreprocessor(fake_preprocess.url, LIMITS)
    try:
        tensors = await preprocess([b"one", b"two", b"three"], GEOMETRY, 2.5)
        assert tensors.shape == (3, 3, CROP, CROP) and len(tensors.data) == 3 * 3 * CROP * CROP
        (call,) = fake_preprocess.servicer.calls
        assert kserve.parameters(call) == {"resize": GEOMETRY.resize, "crop": GEOMETRY.crop}
        (time_left,) = fake_preprocess.servicer.time_left
        assert carries_deadline(time_left, 2.5)
    finally:
        await preprocess.close()


async def test_an_image_preprocess_refuses_is_invalid_argument_naming_it(
    fake_preprocess: Fake,
) -> None:
    preprocess = RemotePreprocessor(fake_preprocess.url, LIMITS)
    try:
        error = await failure(lambda: preprocess([b"fine", REFUSED + b"!", b"fine"], GEOMETRY, 5.0))
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        assert error.message == f"image 1: {REFUSAL}"
    finally:
        await preprocess.close()


async def test_an_oversized_image_is_refused_before_it_is_sent(fake_preprocess: Fake) -> None:
    preprocess = RemotePreprocessor(fake_preprocess.url, LIMITS)
    try:
        too_big = b"\xff\xd8" + b"\x00" * LIMITS.max_bytes
        error = await failure(lambda: preprocess([b"fine", too_big], GEOMETRY, 5.0))
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        assert error.message.startswith("image 1: ") and "max_bytes" in error.message
        assert fake_preprocess.servicer.calls == []
    finally:
        await preprocess.close()


async def test_tensors_of_another_crop_are_internal(
    fake_preprocess: Fake,
) -> None:
    fake_preprocess.servicer.crop = CROP // 2
    preprocess = RemotePreprocessor(fake_preprocess.url, LIMITS)
    try:
        error = await failure(lambda: preprocess([b"image"], GEOMETRY, 5.0))
        assert error.code == grpc.StatusCode.INTERNAL
        assert error.message == (
            f"preprocess at {fake_preprocess.url} returned UINT8 [1, 3, {CROP // 2}, {CROP // 2}]; "
            f"expected UINT8 [1, 3, {CROP}, {CROP}]"
        )
    finally:
        await preprocess.close()
