"""KServe v2 HTTP/REST through the public endpoint of each placement (the stack's is Envoy's
public listener, which routes everything that is not gRPC to middleman's REST port): curl-like
JSON, the binary extension, tritonclient.http unchanged, the real model's answers, and bad
input with the HTTP status Triton would give."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
import tritonclient.http as triton_http
import tritonclient.http.aio as triton_http_aio

from inferline_stack.config import StackConfig
from inferline_testing import media

from .test_bad_input import BAD_IMAGES, expect_error

pytestmark = pytest.mark.e2e


def image_json(images: list[bytes]) -> dict[str, Any]:
    """An infer request as curl users write one: the images base64 in JSON."""
    data = [base64.b64encode(i).decode() for i in images]
    return {"inputs": [{"name": "IMAGE", "datatype": "BYTES", "shape": [len(images)],
                        "parameters": {"content_type": "base64"}, "data": data}]}  # fmt: skip


async def post(url: str, path: str, body: bytes, **headers: str) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"http://{url}{path}", data=body, headers=headers) as response,
    ):
        return response.status, json.loads(await response.read())


def infer_json(datatype: str, shape: list[int], data: list[Any]) -> bytes:
    tensor = {"name": "IMAGE", "datatype": datatype, "shape": shape, "data": data}
    return json.dumps({"inputs": [tensor]}).encode()


async def test_every_route_answers_as_triton_would(public_rest_url: str) -> None:
    async with aiohttp.ClientSession(f"http://{public_rest_url}") as http:
        for path in ("/v2/health/live", "/v2/health/ready", "/v2/models/classifier/ready",
                     "/v2/models/efficientnet_lite2/versions/1/ready"):  # fmt: skip
            async with http.get(path) as response:
                assert response.status == 200, path
        async with http.get("/v2") as response:
            assert (await response.json())["name"] == "inferline-middleman"
        async with http.get("/v2/models/efficientnet_lite2") as response:
            metadata = await response.json()
        assert metadata["inputs"] == [{"name": "IMAGE", "datatype": "BYTES", "shape": [-1, 1]}]
        async with http.get("/v2/models/classifier/config") as response:
            config = await response.json()
        assert config["input"][0]["dims"] == [1] and config["max_batch_size"] > 0
        async with http.post("/v2/repository/index") as response:
            names = {m["name"] for m in await response.json()}
        assert {"classifier", "efficientnet_lite0", "efficientnet_lite2"} <= names


@pytest.mark.parametrize("model", ["classifier", "efficientnet_lite2"])
async def test_a_cat_in_json_is_a_cat(public_rest_url: str, model: str) -> None:
    document = image_json([media.cat_jpeg(), media.cat_jpeg()])
    document["outputs"] = [{"name": "PROBABILITIES", "parameters": {"classification": 3}}]
    status, body = await post(
        public_rest_url, f"/v2/models/{model}/infer", json.dumps(document).encode()
    )
    assert status == 200, body
    [output] = body["outputs"]
    assert output["shape"] == [2, 3]
    for label in output["data"][::3]:  # each image's best
        score, index, _ = label.split(":", 2)
        assert int(index) in media.CAT_CLASSES and 0 < float(score) <= 1


def test_tritonclient_http_as_triton_users_run_it(public_rest_url: str) -> None:
    """The request built only from the model's metadata and configuration (as Triton's image
    client does), binary data both ways, class_count, and async_infer."""
    images = [media.cat_jpeg(), media.cat_jpeg()]
    with triton_http.InferenceServerClient(public_rest_url) as client:
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("classifier")
        metadata = client.get_model_metadata("classifier")
        config = client.get_model_config("classifier")
        [described] = metadata["inputs"]
        shape = [len(images), *config["input"][0]["dims"]]
        assert shape == [2, 1]
        tensor = triton_http.InferInput(described["name"], shape, described["datatype"])
        tensor.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(shape))
        name = metadata["outputs"][0]["name"]
        result = client.infer("classifier", [tensor], outputs=[
            triton_http.InferRequestedOutput(name, binary_data=True)])  # fmt: skip
        probabilities = result.as_numpy(name)
        assert probabilities.shape == (2, 1000)
        assert all(int(row.argmax()) in media.CAT_CLASSES for row in probabilities)
        np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-3)
        top = client.infer("classifier", [tensor], outputs=[
            triton_http.InferRequestedOutput(name, class_count=2)]).as_numpy(name)  # fmt: skip
        assert top.shape == (2, 2) and int(top[0][0].split(b":")[1]) in media.CAT_CLASSES
        pending = client.async_infer("classifier", [tensor])
        assert pending.get_result().as_numpy(name).shape == (2, 1000)


async def test_tritonclient_http_aio_many_at_once(public_rest_url: str) -> None:
    async with triton_http_aio.InferenceServerClient(public_rest_url) as client:

        async def one() -> int:
            tensor = triton_http_aio.InferInput("IMAGE", [1], "BYTES")
            tensor.set_data_from_numpy(np.array([media.cat_jpeg()], dtype=np.object_))
            result = await client.infer("classifier", [tensor])
            return int(result.as_numpy("PROBABILITIES")[0].argmax())

        best = await asyncio.gather(*(one() for _ in range(16)))
    assert set(best) <= set(media.CAT_CLASSES)


@pytest.mark.parametrize("name", sorted(BAD_IMAGES))
def test_bad_image_gets_400_naming_the_image(public_rest_url: str, name: str) -> None:
    make, _, words = BAD_IMAGES[name]

    def infer() -> None:
        with triton_http.InferenceServerClient(public_rest_url) as client:
            tensor = triton_http.InferInput("IMAGE", [2], "BYTES")
            tensor.set_data_from_numpy(np.array([media.cat_jpeg(), make()], dtype=np.object_))
            client.infer("classifier", [tensor])

    expect_error(infer, "400", words)
    expect_error(infer, "400", "image 1")


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b'{"inputs": [', 400, "not valid JSON"),
        (infer_json("FP32", [1], [1.0]), 400, "must be BYTES"),
        (infer_json("BYTES", [2], ["x"]), 400, "1 data elements do not match shape [2]"),
    ],
    ids=["malformed JSON", "wrong datatype", "shape mismatch"],
)
async def test_bad_body_gets_400_with_a_message(
    public_rest_url: str, body: bytes, status: int, words: str
) -> None:
    got, answer = await post(public_rest_url, "/v2/models/classifier/infer", body)
    assert got == status and words in answer["error"], answer


async def test_unknown_model_is_404(public_rest_url: str) -> None:
    document = json.dumps(image_json([media.cat_jpeg()])).encode()
    status, answer = await post(public_rest_url, "/v2/models/resnet/infer", document)
    assert status == 404 and answer["error"].startswith("unknown model 'resnet'")


async def test_a_body_over_the_message_limit_is_413(public_rest_url: str) -> None:
    body = b"\xff\xd8" + b"\x00" * (72 * 1024 * 1024)  # over 64 MiB
    headers = {"Inference-Header-Content-Length": "2"}
    status, answer = await post(public_rest_url, "/v2/models/classifier/infer", body, **headers)
    assert status == 413 and "INFERLINE_MIDDLEMAN_MAX_MESSAGE_BYTES" in answer["error"]
    again, _ = await post(
        public_rest_url, "/v2/models/classifier/infer",
        json.dumps(image_json([media.cat_jpeg()])).encode(),
    )  # fmt: skip
    assert again == 200  # the service stays up


def demo_client(command: str, *args: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "demo_client", command, "--protocol", "http", "--json", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_demo_client_over_rest(stack: StackConfig, tmp_path: Path) -> None:
    target = f"127.0.0.1:{stack.public_port}"
    summary = demo_client("load", "--target", target, "--duration", "3", "--concurrency", "4")
    assert summary["images"] > 0 and summary["errors"] == 0, summary
    cat = tmp_path / "cat.jpg"
    cat.write_bytes(media.cat_jpeg())
    results = demo_client("classify", "--target", target, str(cat), "--top-k", "3")
    [top, *_] = results[str(cat)]
    assert top["index"] in media.CAT_CLASSES
