"""`python -m inferline_models add`: a model from elsewhere, wrapped to the wire contract.

Each wrapped model is compared with ONNX Runtime running the ORIGINAL model on the same pixels,
normalised, reordered and transposed by numpy: the wrapping is right when they agree.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from inferline.catalog import read_card
from inferline_models.__main__ import main
from inferline_models.import_settings import ImportOptions, normalisation, parse_size
from inferline_models.importer import import_classifier
from inferline_models.repository import load_spec, model_dir, onnx_path, parse_config
from inferline_testing.networks import MEAN, STD, export_nhwc_mean_std, tiny_convnet

from .import_support import affine, labels_file, save

# Probabilities of the wrapped model vs softmax(original) on float32 inputs: only the order of
# float operations differs (x*scale + offset vs (x/255 - mean)/std).
PROBS_ATOL = 1e-5
# A float16 network sees the same float16 values either way; its float16 outputs round apart.
FLOAT16_ATOL = 2e-3

Images = npt.NDArray[np.uint8]


def softmax(x: npt.NDArray[Any]) -> npt.NDArray[np.float32]:
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    return np.asarray(e / e.sum(axis=1, keepdims=True), dtype=np.float32)


def run(path: Path, feed: npt.NDArray[Any]) -> npt.NDArray[Any]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (name,) = [i.name for i in session.get_inputs()]
    (out,) = session.run(None, {name: feed})
    return np.asarray(out)


def images(count: int, size: int, seed: int = 0) -> Images:
    return np.random.default_rng(seed).integers(0, 256, (count, 3, size, size), dtype=np.uint8)


def assert_config(repository: Path, name: str, size: int, classes: int, batch: int = 64) -> None:
    """config.pbtxt parses against Triton's model_config.proto and says the wire contract."""
    text = (model_dir(repository, name) / "config.pbtxt").read_text(encoding="utf-8")
    spec = parse_config(text)  # the schema check (tritonclient's model_config_pb2)
    assert spec == load_spec(repository, name)
    config = text_format.Parse(text, mc.ModelConfig())
    assert config.name == name and config.platform == "onnxruntime_onnx"
    assert config.max_batch_size == batch
    (tensor_in,) = config.input
    assert (tensor_in.name, tensor_in.data_type) == ("INPUT", mc.TYPE_UINT8)
    assert list(tensor_in.dims) == [3, size, size]
    (tensor_out,) = config.output
    assert (tensor_out.name, tensor_out.data_type) == ("PROBS", mc.TYPE_FP32)
    assert list(tensor_out.dims) == [classes]
    assert tensor_out.label_filename == "labels.txt"
    (trt,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert trt.parameters["trt_profile_max_shapes"] == f"INPUT:{batch}x3x{size}x{size}"


# -- a real network: EfficientNet-Lite0 taking float32 NHWC, torchvision's mean/std ---------


@pytest.fixture(scope="module")
def nhwc_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("nhwc") / "lite0_nhwc_mean_std.onnx"
    export_nhwc_mean_std(path)
    return path


def test_real_nhwc_mean_std_model_matches_the_original(
    nhwc_model: Path,
    tmp_path: Path,
    cat_chw: Images,
    cat_classes: frozenset[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    labels = tmp_path / "imagenet.txt"
    labels.write_text("".join(f"c{i}\n" for i in range(1000)), encoding="utf-8")
    repository = tmp_path / "repo"
    argv = [
        "add", "--onnx", str(nhwc_model), "--labels", str(labels), "--name", "lite0_nhwc",
        "--layout", "NHWC", "--mean", ",".join(map(str, MEAN)), "--std", ",".join(map(str, STD)),
        "--repository", str(repository),
    ]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "output: logits (detected): appending a Softmax" in out
    assert f"wrote {repository / 'lite0_nhwc'}" in out

    pixels = np.concatenate([cat_chw[None], images(2, 224)])
    wrapped = run(onnx_path(repository, "lite0_nhwc"), pixels)
    normalised = (pixels.astype(np.float32) / 255 - np.reshape(MEAN, (1, 3, 1, 1))) / np.reshape(
        STD, (1, 3, 1, 1)
    )
    original = softmax(run(nhwc_model, normalised.transpose(0, 2, 3, 1).astype(np.float32)))
    assert wrapped.dtype == np.float32 and wrapped.shape == (3, 1000)
    np.testing.assert_allclose(wrapped, original, rtol=0, atol=PROBS_ATOL)
    assert int(wrapped[0].argmax()) in cat_classes

    card, _ = read_card(model_dir(repository, "lite0_nhwc"))
    assert (card.crop, card.resize, card.classes) == (224, 256, 1000)
    assert card.source["file"] == nhwc_model.name
    assert card.source["options"]["layout"] == "NHWC"
    assert card.source["options"]["normalisation"] == {"mean": list(MEAN), "std": list(STD)}
    assert_config(repository, "lite0_nhwc", 224, 1000)


# -- tiny networks: colour order, dtypes, output kinds, batch ---------------------------------


def test_bgr_input_gets_its_channels_reversed(tmp_path: Path) -> None:
    original = save(tiny_convnet(), tmp_path / "bgr.onnx")
    options = ImportOptions(
        name="bgr",
        normalisation=normalisation(
            scale=(1 / 58.0,), offset=(-103.9 / 58, -116.8 / 58, -123.7 / 58)
        ),
        channels="BGR",
    )
    import_classifier(original, labels_file(tmp_path, 5), options, tmp_path / "repo")
    pixels = images(4, 16)
    wrapped = run(onnx_path(tmp_path / "repo", "bgr"), pixels)
    scale = np.float32(1 / 58.0)
    offset = np.asarray([-103.9 / 58, -116.8 / 58, -123.7 / 58], np.float32).reshape(1, 3, 1, 1)
    expected = softmax(run(original, (pixels.astype(np.float32) * scale + offset)[:, ::-1].copy()))
    np.testing.assert_allclose(wrapped, expected, rtol=0, atol=PROBS_ATOL)
    # Not a coincidence of symmetric weights: RGB order would answer differently.
    as_rgb = softmax(run(original, pixels.astype(np.float32) * scale + offset))
    assert np.abs(wrapped - as_rgb).max() > 1e-3
    assert_config(tmp_path / "repo", "bgr", 16, 5)


def test_float16_model_takes_float16_and_answers_float32(tmp_path: Path) -> None:
    original = save(tiny_convnet(dtype="float16", softmax=True), tmp_path / "half.onnx")
    options = ImportOptions(name="half", normalisation=normalisation(mean=(0.5,), std=(0.25,)))
    import_classifier(original, labels_file(tmp_path, 5), options, tmp_path / "repo")
    card, _ = read_card(model_dir(tmp_path / "repo", "half"))
    assert card.source["options"]["input_dtype"] == "float16"
    assert card.source["options"]["output_kind"] == "probabilities (detected)"
    pixels = images(3, 16)
    wrapped = run(onnx_path(tmp_path / "repo", "half"), pixels)
    assert wrapped.dtype == np.float32
    feed = (pixels.astype(np.float32) * np.float32(1 / (255 * 0.25))) + np.float32(-2.0)
    expected = run(original, feed.astype(np.float16)).astype(np.float32)
    np.testing.assert_allclose(wrapped, expected, rtol=0, atol=FLOAT16_ATOL)


def test_uint8_nhwc_bgr_model_gets_pixels_as_they_are(tmp_path: Path) -> None:
    original = save(tiny_convnet(dtype="uint8", layout="NHWC"), tmp_path / "u8.onnx")
    options = ImportOptions(name="u8", channels="BGR", layout="NHWC", output_kind="logits")
    import_classifier(original, labels_file(tmp_path, 5), options, tmp_path / "repo")
    pixels = images(2, 16)
    wrapped = run(onnx_path(tmp_path / "repo", "u8"), pixels)
    expected = softmax(run(original, pixels[:, ::-1].transpose(0, 2, 3, 1).copy()))
    np.testing.assert_allclose(wrapped, expected, rtol=0, atol=PROBS_ATOL)


def test_probabilities_are_not_softmaxed_twice(tmp_path: Path) -> None:
    original = save(tiny_convnet(softmax=True), tmp_path / "p.onnx")
    import_classifier(original, labels_file(tmp_path, 5), affine(1 / 255, 0), tmp_path / "repo")
    wrapped_path = onnx_path(tmp_path / "repo", "m")
    ops = [n.op_type for n in onnx.load(str(wrapped_path)).graph.node]
    assert ops.count("Softmax") == 1
    pixels = images(2, 16)
    expected = run(original, pixels.astype(np.float32) / 255)
    np.testing.assert_allclose(run(wrapped_path, pixels), expected, rtol=0, atol=PROBS_ATOL)


def test_fixed_batch_is_made_dynamic(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    original = save(tiny_convnet(batch=1), tmp_path / "b1.onnx")
    import_classifier(
        original, labels_file(tmp_path, 5), affine(1, 0), tmp_path / "repo", progress=print
    )
    assert "batch axis fixed at 1: made dynamic" in capsys.readouterr().out
    assert run(onnx_path(tmp_path / "repo", "m"), images(5, 16)).shape == (5, 5)


def test_dynamic_height_and_width_take_size(tmp_path: Path) -> None:
    original = save(tiny_convnet(size="W", height="H"), tmp_path / "hw.onnx")
    options = ImportOptions(
        name="m", size=parse_size("20x20"), resize=24, normalisation=normalisation(scale=(1,))
    )
    import_classifier(original, labels_file(tmp_path, 5), options, tmp_path / "repo")
    card, _ = read_card(model_dir(tmp_path / "repo", "m"))
    assert (card.crop, card.resize) == (20, 24)
    assert run(onnx_path(tmp_path / "repo", "m"), images(2, 20)).shape == (2, 5)
    assert_config(tmp_path / "repo", "m", 20, 5)


def test_force_replaces_a_model(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    first = save(tiny_convnet(classes=5), tmp_path / "five.onnx")
    second = save(tiny_convnet(classes=7), tmp_path / "seven.onnx")
    import_classifier(first, labels_file(tmp_path, 5), affine(1, 0), repository)
    import_classifier(second, labels_file(tmp_path, 7), affine(1, 0), repository, force=True)
    assert read_card(model_dir(repository, "m"))[0].classes == 7
    assert sorted(p.name for p in repository.iterdir()) == ["m"]  # no staging left behind


def test_a_wrapped_model_imports_as_it_is(model_repository: Path, tmp_path: Path) -> None:
    """uint8 in, probabilities out, already named INPUT and PROBS: nothing to add, no clash."""
    built = onnx_path(model_repository, "efficientnet_lite0")
    labels = model_dir(model_repository, "efficientnet_lite0") / "labels.txt"
    options = ImportOptions(name="again")
    import_classifier(built, labels, options, tmp_path / "repo")
    card, _ = read_card(model_dir(tmp_path / "repo", "again"))
    assert card.source["options"]["output_kind"] == "probabilities (detected)"
    pixels = images(2, 224)
    np.testing.assert_allclose(
        run(onnx_path(tmp_path / "repo", "again"), pixels), run(built, pixels), rtol=0, atol=1e-6
    )


@pytest.mark.parametrize(
    ("fixture", "name", "size"),
    [
        ("model_repository", "efficientnet_lite0", 224),
        ("lite2_repository", "efficientnet_lite2", 260),
    ],
)
def test_built_in_configs_parse(
    request: pytest.FixtureRequest, fixture: str, name: str, size: int
) -> None:
    """What `make model` wrote goes through the same schema check as an import's."""
    repository: Path = request.getfixturevalue(fixture)
    assert_config(repository, name, size, 1000)
    stamp = json.loads((model_dir(repository, name) / "inferline-export.json").read_text())
    assert stamp["model"] == name
