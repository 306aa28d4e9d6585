"""End to end through the public endpoint: middleman -> real Triton -> real EfficientNet-Lite0."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import tritonclient.grpc as triton

from inferline_testing import media

pytestmark = pytest.mark.e2e


def classify(url: str, images: list[bytes], class_count: int = 3) -> npt.NDArray[Any]:
    with triton.InferenceServerClient(url) as client:
        tensor = triton.InferInput("IMAGE", [len(images)], "BYTES")
        tensor.set_data_from_numpy(np.array(images, dtype=np.object_))
        output = triton.InferRequestedOutput("PROBABILITIES", class_count=class_count)
        result = client.infer("classifier", [tensor], outputs=[output])
        return np.asarray(result.as_numpy("PROBABILITIES"))


def top_indices(row: npt.NDArray[Any]) -> list[int]:
    return [int(item.split(b":")[1]) for item in row]


def test_a_cat_photo_is_a_cat(public_url: str) -> None:
    top3 = classify(public_url, [media.cat_jpeg()])
    assert top3.shape == (1, 3)
    assert set(top_indices(top3[0])) & set(media.CAT_CLASSES), top3


def test_classification_strings_are_score_index_label(public_url: str) -> None:
    (row,) = classify(public_url, [media.encode(media.photo("coffee"))], class_count=5)
    scores = [float(item.split(b":")[0]) for item in row]
    assert scores == sorted(scores, reverse=True) and 0 < scores[0] <= 1
    assert row[0].split(b":", 2)[2] in (b"espresso", b"cup", b"coffee mug")


def test_probabilities_are_a_distribution_per_image(public_url: str) -> None:
    with triton.InferenceServerClient(public_url) as client:
        images = [media.cat_jpeg(), media.encode(media.photo("coffee"))]
        tensor = triton.InferInput("IMAGE", [2], "BYTES")
        tensor.set_data_from_numpy(np.array(images, dtype=np.object_))
        probs = client.infer("classifier", [tensor]).as_numpy("PROBABILITIES")
    assert probs.shape == (2, 1000) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, atol=1e-3)
    assert int(probs[0].argmax()) in media.CAT_CLASSES
    assert int(probs[1].argmax()) not in media.CAT_CLASSES


@pytest.mark.parametrize(("width", "height"), [(8160, 6120), (16320, 12240)], ids=["50mp", "200mp"])
def test_camera_photos_of_50_and_200_mp_classify_normally(
    public_url: str, width: int, height: int
) -> None:
    """A phone's 50 or 200 MP JPEG (5-25 MiB; the cat upscaled, with sensor grain): within the
    limits, decoded at 1/8 wherever it is decoded, and still a cat."""
    top3 = classify(public_url, [media.camera_jpeg(width, height)])
    assert top_indices(top3[0])[0] in media.CAT_CLASSES, top3  # Egyptian cat, 0.41


@pytest.mark.parametrize("name", sorted(media.UNUSUAL))
def test_unusual_images_classify_normally(public_url: str, name: str) -> None:
    top3 = classify(public_url, [media.UNUSUAL[name]()])
    assert set(top_indices(top3[0])) & set(media.CAT_CLASSES), (name, top3)


def test_metadata_answers_as_triton_would(public_url: str) -> None:
    with triton.InferenceServerClient(public_url) as client:
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("classifier")
        assert not client.is_model_ready("no_such_model")
        assert "classification" in client.get_server_metadata().extensions
        meta = client.get_model_metadata("classifier")
        assert [(t.name, t.datatype, list(t.shape)) for t in meta.inputs] == [
            ("IMAGE", "BYTES", [-1, 1])
        ]
        assert [(t.name, t.datatype, list(t.shape)) for t in meta.outputs] == [
            ("PROBABILITIES", "FP32", [-1, 1000])
        ]
        config = client.get_model_config("classifier").config
        assert config.name == "classifier" and config.max_batch_size > 0


def test_a_request_built_from_the_models_description_is_answered(public_url: str) -> None:
    """As Triton's own image clients build theirs: the input's name and datatype from the
    metadata, its shape from the configuration's dims behind the batch dimension."""
    images = [media.cat_jpeg(), media.cat_jpeg()]
    with triton.InferenceServerClient(public_url) as client:
        (described,) = client.get_model_metadata("classifier").inputs
        config = client.get_model_config("classifier").config
        shape = [len(images), *config.input[0].dims]
        assert config.max_batch_size > 0 and shape == [2, 1]
        tensor = triton.InferInput(described.name, shape, described.datatype)
        tensor.set_data_from_numpy(np.array(images, dtype=np.object_).reshape(shape))
        output = triton.InferRequestedOutput(
            client.get_model_metadata("classifier").outputs[0].name
        )
        result = client.infer("classifier", [tensor], outputs=[output])
    probabilities = result.as_numpy("PROBABILITIES")
    assert probabilities is not None and probabilities.shape == (2, 1000)
    assert all(int(row.argmax()) in media.CAT_CLASSES for row in probabilities)
