"""A user's own model through the pipeline: a float32 network that expects NHWC input normalised
with torchvision's mean and std, imported with `python -m inferline_models add`, served by the
real Triton behind middleman, answers as ONNX Runtime answers on the same pixels."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest
import tritonclient.grpc as triton

from inferline.imaging.decode import Geometry, Limits, decode_image
from inferline_testing import media
from inferline_testing.direct import direct_pipeline
from inferline_testing.networks import MEAN, STD, export_nhwc_mean_std

pytestmark = pytest.mark.e2e

NAME = "my_classifier"
GEOMETRY = Geometry(256, 224)
# Float32 all the way on both sides; only the order of operations differs.
TOLERANCE = 1e-5
START_TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The user's model as they have it: an ONNX file of a real network, NHWC, mean/std."""
    path = tmp_path_factory.mktemp("user") / "model.onnx"
    export_nhwc_mean_std(path)
    return path


@pytest.fixture(scope="module")
def imported(exported: Path) -> Path:
    """A model repository holding the user's model, imported with the documented command."""
    repository = exported.parent / "repository"
    labels = exported.parent / "labels.txt"
    labels.write_text("\n".join(f"class {i}" for i in range(1000)) + "\n", encoding="utf-8")
    subprocess.run(
        [sys.executable, "-m", "inferline_models", "add", "--onnx", str(exported),
         "--labels", str(labels), "--name", NAME, "--repository", str(repository),
         "--layout", "NHWC", "--size", "224", "--resize", str(GEOMETRY.resize),
         "--mean", ",".join(map(str, MEAN)), "--std", ",".join(map(str, STD))],
        check=True,
    )  # fmt: skip
    return repository


@pytest.fixture(scope="module")
def middleman(imported: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Triton serving the imported model, and middleman (decoding in process) in front."""
    with direct_pipeline(tmp_path_factory.mktemp("import-run"), imported, NAME) as address:
        yield address


def reference(model: Path, image: bytes) -> npt.NDArray[np.float32]:
    """ONNX Runtime on the user's own file: the same decoded pixels, normalised and laid out
    by numpy as the user's model expects, softmax of its logits."""
    pixels = decode_image(image, GEOMETRY, Limits()).astype(np.float32) / 255  # [3, H, W] RGB
    normalised = (pixels - np.array(MEAN, np.float32)[:, None, None]) / np.array(STD, np.float32)[
        :, None, None
    ]
    nhwc = np.ascontiguousarray(normalised.transpose(1, 2, 0)[None])
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    (logits,) = session.run(None, {session.get_inputs()[0].name: nhwc})
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return np.asarray(shifted / shifted.sum(axis=1, keepdims=True), np.float32)


@pytest.mark.parametrize("model", ["classifier", NAME])
def test_an_imported_model_answers_as_onnx_runtime_does(
    middleman: str, exported: Path, model: str
) -> None:
    photos = [media.cat_jpeg(), media.encode(media.photo("coffee"))]
    with triton.InferenceServerClient(middleman) as client:
        tensor = triton.InferInput("IMAGE", [len(photos)], "BYTES")
        tensor.set_data_from_numpy(np.array(photos, dtype=np.object_))
        result = client.infer(model, [tensor])
    probabilities = result.as_numpy("PROBABILITIES")
    assert probabilities is not None and probabilities.shape == (2, 1000)
    expected = np.concatenate([reference(exported, photo) for photo in photos])
    np.testing.assert_allclose(probabilities, expected, rtol=0, atol=TOLERANCE)
    assert int(probabilities[0].argmax()) in media.CAT_CLASSES


def test_the_imported_models_labels_come_back(middleman: str) -> None:
    with triton.InferenceServerClient(middleman) as client:
        tensor = triton.InferInput("IMAGE", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([media.cat_jpeg()], dtype=np.object_))
        output = triton.InferRequestedOutput("PROBABILITIES", class_count=1)
        result = client.infer(NAME, [tensor], outputs=[output])
    (top,) = result.as_numpy("PROBABILITIES")[0]
    _, index, label = bytes(top).decode().split(":", 2)
    assert int(index) in media.CAT_CLASSES and label == f"class {index}"
