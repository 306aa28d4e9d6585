"""middleman's KServe v2 REST API on port 0, in front of fake upstreams: every route, JSON and
binary tensors, the classification extension, tritonclient.http unchanged, and every refusal
with the HTTP status Triton would give and a message saying what to change."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import numpy as np
import pytest
import pytest_asyncio
import tritonclient.http.aio as triton_http
from prometheus_client import REGISTRY
from tritonclient.utils import InferenceServerException

from inferline.labels import load_labels
from inferline.tensors import join_bytes
from inferline_testing.waits import wait_for_state
from middleman import app

from .conftest import BASE, REFUSED, Fake, StartMiddleman

IMAGES = [b"first image", b"second image"]
LIMIT = 64 * 1024  # a small public message limit, so a body over it is cheap to send


@pytest_asyncio.fixture
async def middleman(start_middleman: StartMiddleman) -> app.Middleman:
    return await start_middleman(
        max_message_bytes=LIMIT, max_image_bytes=LIMIT // 2, max_video_bytes=LIMIT // 2
    )


@pytest_asyncio.fixture
async def http(middleman: app.Middleman) -> AsyncIterator[aiohttp.ClientSession]:
    base = f"http://127.0.0.1:{middleman.rest_port}"
    async with aiohttp.ClientSession(base) as session:
        yield session


def image_input(images: list[bytes], **overrides: Any) -> dict[str, Any]:
    """Input IMAGE with the images as base64 JSON data."""
    data = [base64.b64encode(i).decode() for i in images]
    return {"name": "IMAGE", "datatype": "BYTES", "shape": [len(images)],
            "parameters": {"content_type": "base64"}, "data": data, **overrides}  # fmt: skip


async def post_json(
    http: aiohttp.ClientSession, document: object, model: str = "classifier"
) -> tuple[int, Any]:
    async with http.post(f"/v2/models/{model}/infer", json=document) as response:
        return response.status, await response.json(content_type=None)


def count(name: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_server_and_model_description_as_triton_gives_them(
    http: aiohttp.ClientSession,
) -> None:
    async with http.get("/v2") as response:
        server = await response.json()
    assert server["name"] == "inferline-middleman"
    assert "classification" in server["extensions"]
    for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/classifier/ready",
                 "/v2/models/classifier/versions/1/ready"):  # fmt: skip
        async with http.get(path) as response:
            assert response.status == 200, path
    async with http.get("/v2/models/classifier/versions/1") as response:
        metadata = await response.json()
    assert metadata["inputs"] == [{"name": "IMAGE", "datatype": "BYTES", "shape": [-1, 1]}]
    assert metadata["outputs"] == [{"name": "PROBABILITIES", "datatype": "FP32",
                                    "shape": [-1, 1000]}]  # fmt: skip
    async with http.get("/v2/models/classifier/config") as response:
        config = await response.json()
    assert config["max_batch_size"] == BASE.max_batch
    assert config["input"] == [{"name": "IMAGE", "data_type": "TYPE_STRING", "dims": [1]}]
    async with http.post("/v2/repository/index") as response:
        index = await response.json()
    assert {m["name"] for m in index} == {"classifier", "fake_classifier", "classifier_video"}
    assert {m["state"] for m in index} == {"READY"}


async def test_json_request_gets_the_upstreams_probabilities(
    http: aiohttp.ClientSession, fake_triton: Fake
) -> None:
    status, body = await post_json(http, {"id": "r1", "inputs": [image_input(IMAGES)]})
    assert status == 200, body
    assert (body["model_name"], body["model_version"], body["id"]) == ("classifier", "1", "r1")
    [output] = body["outputs"]
    assert (output["name"], output["datatype"], output["shape"]) == ("PROBABILITIES", "FP32",
                                                                     [2, 1000])  # fmt: skip
    expected = np.tile(fake_triton.servicer.probabilities, 2)
    np.testing.assert_allclose(output["data"], expected, rtol=1e-6)
    # what went upstream: the decoded bytes of both images, through the preprocess fake
    assert len(fake_triton.servicer.calls) == 1


async def test_classification_extension_over_json(
    http: aiohttp.ClientSession, fake_triton: Fake
) -> None:
    document = {
        "inputs": [image_input(IMAGES[:1], shape=[1, 1])],
        "outputs": [{"name": "PROBABILITIES", "parameters": {"classification": 3}}],
    }
    status, body = await post_json(http, document)
    assert status == 200, body
    [output] = body["outputs"]
    assert (output["datatype"], output["shape"]) == ("BYTES", [1, 3])
    top = np.argsort(-fake_triton.servicer.probabilities, kind="stable")[:3]
    assert [int(s.split(":")[1]) for s in output["data"]] == top.tolist()
    assert output["data"][0].endswith(f":{load_labels()[top[0]]}")


async def test_binary_tensors_both_ways(http: aiohttp.ClientSession, fake_triton: Fake) -> None:
    """The binary extension by hand: JSON header, then the length-prefixed BYTES tensor."""
    raw = join_bytes(IMAGES)
    header = json.dumps({
        "inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [2, 1],
                    "parameters": {"binary_data_size": len(raw)}}],
        "outputs": [{"name": "PROBABILITIES", "parameters": {"binary_data": True}}],
    }).encode()  # fmt: skip
    headers = {"Inference-Header-Content-Length": str(len(header))}
    async with http.post("/v2/models/classifier/infer", data=header + raw,
                         headers=headers) as response:  # fmt: skip
        assert response.status == 200
        length = int(response.headers["Inference-Header-Content-Length"])
        body = await response.read()
    head = json.loads(body[:length])
    [output] = head["outputs"]
    assert output["parameters"] == {"binary_data_size": 2 * 1000 * 4}
    values = np.frombuffer(body[length:], np.float32).reshape(2, 1000)
    np.testing.assert_array_equal(values[1], fake_triton.servicer.probabilities)


async def test_tritonclient_http_unchanged(middleman: app.Middleman, fake_triton: Fake) -> None:
    """What a Triton user runs: metadata and config, infer with binary data and class_count,
    and async infer, through tritonclient.http."""
    url = f"127.0.0.1:{middleman.rest_port}"
    async with triton_http.InferenceServerClient(url) as client:
        assert await client.is_server_ready()
        metadata = await client.get_model_metadata("classifier")
        config = await client.get_model_config("classifier")
        # the request built only from the model's description, as Triton's image client does
        tensor = triton_http.InferInput(
            metadata["inputs"][0]["name"], [len(IMAGES), *config["input"][0]["dims"]], "BYTES"
        )
        tensor.set_data_from_numpy(np.array(IMAGES, dtype=np.object_).reshape(-1, 1))
        output = triton_http.InferRequestedOutput(metadata["outputs"][0]["name"], class_count=2)
        result = await client.infer("classifier", [tensor], outputs=[output])
        top = result.as_numpy("PROBABILITIES")
        assert top.shape == (2, 2)
        best = int(np.argmax(fake_triton.servicer.probabilities))
        assert int(top[0][0].split(b":")[1]) == best
        plain = await client.infer("classifier", [tensor])  # no outputs: all, binary
        probabilities = plain.as_numpy("PROBABILITIES")
        np.testing.assert_array_equal(probabilities[0], fake_triton.servicer.probabilities)
        with pytest.raises(InferenceServerException) as caught:
            await client.get_model_metadata("resnet")
        assert caught.value.status() == "404"
        assert "unknown model 'resnet'" in caught.value.message()


def bad_requests() -> dict[str, tuple[object, int, str]]:
    """name -> (JSON body, HTTP status, words of the message)."""
    good = image_input(IMAGES)
    return {
        "not an object": ([good], 400, "must be a JSON object, not a list"),
        "no inputs": ({}, 400, 'needs "inputs"'),
        "wrong datatype": (
            {"inputs": [{**good, "datatype": "FP32", "data": [1.0, 2.0]}]},
            400,
            "input 'IMAGE' must be BYTES",
        ),
        "shape mismatch": (
            {"inputs": [{**good, "shape": [3]}]},
            400,
            "2 data elements do not match shape [3]",
        ),
        "negative shape": ({"inputs": [{**good, "shape": [-1]}]}, 400, "non-negative integers"),
        "bad base64": ({"inputs": [{**good, "data": ["%%%", "AA=="]}]}, 400, "not valid base64"),
        "wrong input": ({"inputs": [{**good, "name": "INPUT"}]}, 400, "expects input 'IMAGE'"),
        "refused image": ({"inputs": [image_input([IMAGES[0], REFUSED + b"!"])]}, 400, "image 1: "),
        "unknown output": (
            {"inputs": [good], "outputs": [{"name": "LOGITS"}]},
            400,
            "unknown output 'LOGITS'",
        ),
        "bad class_count": (
            {
                "inputs": [good],
                "outputs": [{"name": "PROBABILITIES", "parameters": {"classification": "3"}}],
            },
            400,
            "classification must be a non-negative integer",
        ),
        "too many images": (
            {"inputs": [image_input([b"i"] * (BASE.max_batch + 1))]},
            400,
            f"1 <= N <= {BASE.max_batch} (max_batch)",
        ),
        "bad timeout": ({"inputs": [good], "parameters": {"timeout": "soon"}}, 400, "microseconds"),
        "shared memory": (
            {"inputs": [{**good, "parameters": {"shared_memory_region": "r"}}]},
            501,
            "shared memory is not supported",
        ),
    }


@pytest.mark.parametrize("name", sorted(bad_requests()))
async def test_bad_request_gets_a_precise_status_and_message(
    http: aiohttp.ClientSession, fake_triton: Fake, name: str
) -> None:
    document, status, words = bad_requests()[name]
    got, body = await post_json(http, document)
    assert (got, list(body)) == (status, ["error"]), body
    assert words in body["error"]
    assert fake_triton.servicer.calls == []
    good, _ = await post_json(http, {"inputs": [image_input(IMAGES)]})
    assert good == 200  # the service stays up


@pytest.mark.parametrize(
    ("body", "headers", "status", "words"),
    [
        (b"{not json", {}, 400, "not valid JSON"),
        (b"\xff\xfe", {}, 400, "not valid JSON"),
        (b"{}", {"Inference-Header-Content-Length": "99"}, 400, "at most the body's 2"),
        (
            b'{"inputs": []}' + b"xx",
            {"Inference-Header-Content-Length": "14"},
            400,
            'needs "inputs"',
        ),
        (
            json.dumps({"inputs": [image_input(IMAGES)]}).encode() + b"left over",
            {"Inference-Header-Content-Length": ""},
            400,
            "Inference-Header-Content-Length is ''",
        ),
        (b"x" * (LIMIT + 1), {}, 413, f"over the limit of {LIMIT} bytes"),
    ],
    ids=["malformed", "not utf-8", "header past the body", "no inputs", "bad header", "too big"],
)
async def test_bad_body_gets_a_precise_status(
    http: aiohttp.ClientSession, body: bytes, headers: dict[str, str], status: int, words: str
) -> None:
    async with http.post("/v2/models/classifier/infer", data=body, headers=headers) as response:
        assert response.status == status
        message = (await response.json(content_type=None))["error"]
    assert words in message


async def test_binary_data_that_no_input_claims_is_refused(http: aiohttp.ClientSession) -> None:
    header = json.dumps({"inputs": [image_input(IMAGES)]}).encode()
    headers = {"Inference-Header-Content-Length": str(len(header))}
    async with http.post("/v2/models/classifier/infer", data=header + b"extra",
                         headers=headers) as response:  # fmt: skip
        assert response.status == 400
        assert "5 bytes of binary data" in (await response.json())["error"]


async def test_unknown_model_and_video_over_rest(http: aiohttp.ClientSession) -> None:
    status, body = await post_json(http, {"inputs": [image_input(IMAGES)]}, model="resnet")
    assert status == 404 and body["error"].startswith("unknown model 'resnet'")
    async with http.get("/v2/models/classifier/versions/2") as response:
        assert response.status == 404
        assert "has no version '2'" in (await response.json())["error"]
    async with http.get("/v2/models/resnet/ready") as response:
        assert response.status == 400  # not ready, as Triton answers
    status, body = await post_json(http, {"inputs": [image_input(IMAGES)]}, "classifier_video")
    assert status == 400 and "call ModelStreamInfer over gRPC" in body["error"]


@pytest.mark.parametrize(
    ("code", "status"),
    [(grpc.StatusCode.UNAVAILABLE, 503), (grpc.StatusCode.RESOURCE_EXHAUSTED, 429),
     (grpc.StatusCode.INTERNAL, 500), (grpc.StatusCode.INVALID_ARGUMENT, 400)],
    ids=lambda v: getattr(v, "name", str(v)),
)  # fmt: skip
async def test_an_upstream_failure_gets_tritons_http_status_naming_the_hop(
    http: aiohttp.ClientSession, fake_triton: Fake, code: grpc.StatusCode, status: int
) -> None:
    fake_triton.servicer.failures.append(code)
    got, body = await post_json(http, {"inputs": [image_input(IMAGES)]})
    assert got == status
    assert body["error"] == f"inference at {fake_triton.url}: fake upstream says {code.name}"


async def test_the_timeout_parameter_is_the_requests_deadline(
    http: aiohttp.ClientSession, fake_preprocess: Fake, fake_triton: Fake
) -> None:
    fake_preprocess.servicer.gate.clear()  # preprocess never answers
    document = {"inputs": [image_input(IMAGES)], "parameters": {"timeout": 300_000}}  # 0.3 s
    status, body = await post_json(http, document)
    assert status == 504
    assert body["error"].startswith(f"preprocess at {fake_preprocess.url}: ")
    assert fake_triton.servicer.calls == []


async def test_rest_requests_are_measured_as_grpc_ones_are(http: aiohttp.ClientSession) -> None:
    route = "/v2/models/{model}/infer"
    ok = {"route": route, "model": "classifier", "code": "200"}
    refused = {"route": route, "model": "classifier", "code": "400"}
    images = {"model": "classifier"}
    before = [count("inferline_middleman_http_requests_total", ok),
              count("inferline_middleman_http_requests_total", refused),
              count("inferline_middleman_images_total", images)]  # fmt: skip
    await post_json(http, {"inputs": [image_input(IMAGES)]})
    await post_json(http, {"inputs": [image_input(IMAGES, shape=[5])]})
    after = [count("inferline_middleman_http_requests_total", ok),
             count("inferline_middleman_http_requests_total", refused),
             count("inferline_middleman_images_total", images)]  # fmt: skip
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 2]
    assert count("inferline_middleman_http_received_bytes_total",
                 {"route": route, "model": "classifier"}) > 0  # fmt: skip


async def test_a_request_in_flight_when_stopping_is_answered(
    start_middleman: StartMiddleman, fake_preprocess: Fake
) -> None:
    middleman = await start_middleman()
    fake_preprocess.servicer.gate.clear()  # the request waits in preprocess
    async with aiohttp.ClientSession(f"http://127.0.0.1:{middleman.rest_port}") as http:
        pending = asyncio.create_task(post_json(http, {"inputs": [image_input(IMAGES)]}))
        await wait_for_state(lambda: fake_preprocess.servicer.calls, 10, "the request upstream")
        stopping = asyncio.create_task(middleman.stop(10))
        await wait_for_state(lambda: not middleman.rest.live, 10, "REST no longer live")
        fake_preprocess.servicer.gate.set()
        status, body = await pending
        await stopping
    assert status == 200, body
