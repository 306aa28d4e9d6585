"""middleman's gRPC servicer end to end on port 0, in front of fake upstreams: errors from
either hop come back with their status and a message naming the hop; deadlines travel on;
refused requests never reach an upstream; answers are built from what the upstream said."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as triton
from prometheus_client import REGISTRY
from tritonclient.grpc import service_pb2

from inferline.labels import load_labels

from .conftest import (
    BASE,
    Fake,
    MakeMiddleman,
    bytes_request,
    call,
    carries_deadline,
    rpc_error,
)

HOPS = {"inference": "fake_triton", "preprocess": "fake_preprocess"}
IMAGES = [b"first image", b"second image"]


@pytest.mark.parametrize("hop", sorted(HOPS))
@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INVALID_ARGUMENT,
    ],
    ids=lambda c: c.name,
)
async def test_an_upstream_failure_comes_back_with_its_status_naming_the_hop(
    make_middleman: MakeMiddleman,
    request: pytest.FixtureRequest,
    hop: str,
    code: grpc.StatusCode,
) -> None:
    url = await make_middleman()
    fake: Fake = request.getfixturevalue(HOPS[hop])
    fake.servicer.failures.append(code)
    error = await rpc_error(url, bytes_request(IMAGES))
    assert error.code() == code
    assert error.details() == f"{hop} at {fake.url}: fake upstream says {code.name}"


@pytest.mark.parametrize(
    ("caller_s", "default_s", "low_s", "high_s"),
    [
        (3.0, 30.0, 0.0, 3.0),  # a caller's short deadline reaches both hops
        (None, 7.0, 0.0, 7.0),  # without one, each hop gets the configured default
        (60.0, 7.0, 7.0, 60.0),  # a caller's deadline longer than the default wins too
    ],
)
async def test_each_hop_gets_the_callers_deadline_or_the_default(
    make_middleman: MakeMiddleman,
    fake_preprocess: Fake,
    fake_triton: Fake,
    caller_s: float | None,
    default_s: float,
    low_s: float,
    high_s: float,
) -> None:
    url = await make_middleman(upstream_timeout_s=default_s)
    await call(url, bytes_request(IMAGES), deadline_s=caller_s)
    (decoding,) = fake_preprocess.servicer.time_left
    (inference,) = fake_triton.servicer.time_left
    for time_left in (decoding, inference):
        assert carries_deadline(time_left, high_s)
        assert time_left is not None and time_left > low_s
    assert decoding is not None and inference is not None
    # One budget: inference gets what decoding left (each rounded up on the wire).
    assert carries_deadline(inference, decoding)


async def test_a_deadline_that_runs_out_upstream_is_deadline_exceeded_naming_the_hop(
    make_middleman: MakeMiddleman, fake_preprocess: Fake, fake_triton: Fake
) -> None:
    url = await make_middleman(upstream_timeout_s=0.3)
    fake_preprocess.servicer.gate.clear()  # preprocess never answers; the default runs out
    error = await rpc_error(url, bytes_request(IMAGES))
    assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert (error.details() or "").startswith(f"preprocess at {fake_preprocess.url}: ")
    assert fake_triton.servicer.calls == []


def with_output(
    request: service_pb2.ModelInferRequest, name: str, class_count: int | str
) -> service_pb2.ModelInferRequest:
    output = request.outputs.add(name=name)
    if isinstance(class_count, str):
        output.parameters["classification"].string_param = class_count
    else:
        output.parameters["classification"].int64_param = class_count
    return request


REFUSED = {
    "unknown output": (
        with_output(bytes_request(IMAGES), "LOGITS", 0),
        grpc.StatusCode.INVALID_ARGUMENT,
        "unknown output 'LOGITS'",
    ),
    "bad class_count": (
        with_output(bytes_request(IMAGES), "PROBABILITIES", "3"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "classification must be a non-negative integer",
    ),
    "more than max_batch": (
        bytes_request([b"image"] * (BASE.max_batch + 1)),
        grpc.StatusCode.INVALID_ARGUMENT,
        f"1 <= N <= {BASE.max_batch} (max_batch)",
    ),
    "no images": (bytes_request([]), grpc.StatusCode.INVALID_ARGUMENT, "got [0]"),
    "wrong input": (
        bytes_request(IMAGES, name="INPUT"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "expects input 'IMAGE'",
    ),
    "video model": (
        bytes_request([b"video"], name="VIDEO", model="classifier_video"),
        grpc.StatusCode.INVALID_ARGUMENT,
        "call ModelStreamInfer",
    ),
    "unknown model": (
        bytes_request(IMAGES, model="resnet"),
        grpc.StatusCode.NOT_FOUND,
        "unknown model 'resnet'",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_a_refused_request_never_reaches_an_upstream(
    make_middleman: MakeMiddleman, fake_preprocess: Fake, fake_triton: Fake, case: str
) -> None:
    url = await make_middleman()
    request, code, words = REFUSED[case]
    error = await rpc_error(url, request)
    assert error.code() == code
    assert words in (error.details() or "")
    assert fake_preprocess.servicer.calls == fake_triton.servicer.calls == []


async def test_classification_strings_are_the_upstreams_top_k_with_labels(
    make_middleman: MakeMiddleman, fake_triton: Fake
) -> None:
    url = await make_middleman()
    labels = load_labels("")
    expected = fake_triton.servicer.probabilities
    async with triton.InferenceServerClient(url) as client:
        tensor = triton.InferInput("IMAGE", [len(IMAGES)], "BYTES")
        tensor.set_data_from_numpy(np.array(IMAGES, dtype=np.object_))
        top = triton.InferRequestedOutput("PROBABILITIES", class_count=4)
        strings = (await client.infer("classifier", [tensor], outputs=[top])).as_numpy(
            "PROBABILITIES"
        )
        plain = (await client.infer("classifier", [tensor])).as_numpy("PROBABILITIES")
    best = sorted(range(len(expected)), key=lambda i: -expected[i])[:4]
    assert strings.shape == (len(IMAGES), 4)
    for row in strings:
        parsed = [item.decode().split(":", 2) for item in row]
        assert [int(index) for _, index, _ in parsed] == best
        assert [label for _, _, label in parsed] == [labels[i] for i in best]
        assert [float(score) for score, _, _ in parsed] == pytest.approx(
            [float(expected[i]) for i in best], abs=5e-7
        )
    np.testing.assert_array_equal(plain, np.tile(expected, (len(IMAGES), 1)))


def stage_count(stage: str) -> float:
    name = "inferline_middleman_stage_duration_seconds_count"
    return REGISTRY.get_sample_value(name, {"model": "classifier", "stage": stage}) or 0.0


async def test_every_stage_of_a_request_is_timed(make_middleman: MakeMiddleman) -> None:
    url = await make_middleman()
    stages = ("decode", "infer", "postprocess")
    before = [stage_count(s) for s in stages]
    images = REGISTRY.get_sample_value("inferline_middleman_images_total", {"model": "classifier"})
    await call(url, bytes_request(IMAGES))
    assert [stage_count(s) for s in stages] == [count + 1 for count in before]
    after = REGISTRY.get_sample_value("inferline_middleman_images_total", {"model": "classifier"})
    assert (after or 0.0) - (images or 0.0) == len(IMAGES)


async def test_an_unready_upstream_makes_middleman_unready(
    make_middleman: MakeMiddleman, fake_triton: Fake
) -> None:
    url = await make_middleman(triton_model="not_served_by_the_fake")
    async with triton.InferenceServerClient(url) as client:
        assert await client.is_server_live()
        assert not await client.is_server_ready()
        assert not await client.is_model_ready("classifier")
    error = await rpc_error(url, bytes_request(IMAGES))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details() == (
        f"inference at {fake_triton.url}: unknown model 'not_served_by_the_fake'"
    )
