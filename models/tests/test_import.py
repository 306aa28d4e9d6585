"""`python -m inferline_models add`: a model from elsewhere, wrapped to the wire contract.

Each wrapped model is compared with ONNX Runtime running the ORIGINAL model on the same pixels,
normalised, reordered and transposed by numpy: the wrapping is right when they agree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
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
from inferline_models.__main__ import ADD_FLAGS, main
from inferline_models.importer import (
    SETTINGS,
    ImportOptions,
    ModelImportError,
    SettingError,
    import_classifier,
    normalisation,
    parse_floats,
    parse_size,
)
from inferline_models.repository import load_spec, model_dir, onnx_path, parse_config
from inferline_testing.networks import MEAN, STD, export_nhwc_mean_std, tiny_convnet

# Probabilities of the wrapped model vs softmax(original) on float32 inputs: only the order of
# float operations differs (x*scale + offset vs (x/255 - mean)/std).
PROBS_ATOL = 1e-5
# A float16 network sees the same float16 values either way; its float16 outputs round apart.
FLOAT16_ATOL = 2e-3

Images = npt.NDArray[np.uint8]
FLAG = re.compile(r"--[a-z][a-z-]*")


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


def labels_file(directory: Path, count: int) -> Path:
    path = directory / f"labels{count}.txt"
    path.write_text("".join(f"class {i}\n" for i in range(count)), encoding="utf-8")
    return path


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save_model(model, str(path))
    return path


def affine(scale: float, offset: float) -> ImportOptions:
    return ImportOptions(name="m", normalisation=normalisation(scale=(scale,), offset=(offset,)))


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


def test_option_parsing() -> None:
    assert parse_floats("1/128") == (1 / 128,)
    assert parse_floats("-127/128, 0.5,1") == (-127 / 128, 0.5, 1.0)
    assert parse_size("224") == parse_size("224x224") == 224
    norm = normalisation(mean=MEAN, std=STD)
    assert norm is not None
    np.testing.assert_allclose(norm.scale, [1 / (255 * s) for s in STD])
    np.testing.assert_allclose(norm.offset, [-m / s for m, s in zip(MEAN, STD, strict=True)])
    assert normalisation() is None


def test_cli_reads_negative_values_and_refuses_with_exit_code_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = save(tiny_convnet(), tmp_path / "t.onnx")
    labels = labels_file(tmp_path, 5)
    base = ["add", "--onnx", str(original), "--labels", str(labels), "--name", "t",
            "--repository", str(tmp_path / "repo")]  # fmt: skip
    assert main([*base, "--scale", "1/128", "--offset", "-127/128"]) == 0
    assert read_card(model_dir(tmp_path / "repo", "t"))[0].source["options"]["normalisation"] == {
        "scale": [1 / 128] * 3,
        "offset": [-127 / 128] * 3,
    }
    capsys.readouterr()
    assert main([*base, "--scale", "1"]) == 1
    err = capsys.readouterr().err
    assert err == f"error: model t exists in {tmp_path / 'repo'}; --force replaces it\n"


# -- refusals: each names the file and what to do ----------------------------------------------


def refusal(
    tmp_path: Path,
    model: onnx.ModelProto | bytes,
    options: ImportOptions,
    labels: int = 5,
) -> str:
    path = tmp_path / "model.onnx"
    if isinstance(model, bytes):
        path.write_bytes(model)
    else:
        save(model, path)
    with pytest.raises(ModelImportError) as caught:
        import_classifier(path, labels_file(tmp_path, labels), options, tmp_path / "repo")
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())
    assert "--" not in str(caught.value)  # the importer names settings its own way
    return caught.value.render(ADD_FLAGS).replace(str(path), "FILE")  # as `add` says it


def rank3() -> onnx.ModelProto:
    model = tiny_convnet()
    shape = model.graph.input[0].type.tensor_type.shape
    del shape.dim[0]
    return model


def two_inputs() -> onnx.ModelProto:
    model = tiny_convnet()
    model.graph.input.append(
        onnx.helper.make_tensor_value_info("mask", onnx.TensorProto.FLOAT, [1])
    )
    return model


REFUSALS: dict[str, tuple[Callable[[], onnx.ModelProto | bytes], ImportOptions, int, str]] = {
    "not_onnx": (
        lambda: b"\x89PNG\r\n\x1a\n not a model",
        affine(1, 0),
        5,
        "FILE is not an ONNX model: Error parsing message with type 'onnx.ModelProto'",
    ),
    "empty_file": (
        lambda: b"",
        affine(1, 0),
        5,
        "FILE is not an ONNX model: no IR version or no graph nodes",
    ),
    "wrong_rank": (
        rank3,
        affine(1, 0),
        5,
        "FILE: input 'x' FLOAT [3, 16, 16] has the wrong rank (3): the import path takes rank-4 "
        "images, [batch, 3, H, W] (--layout NCHW) or [batch, H, W, 3] (--layout NHWC)",
    ),
    "output_width_vs_labels": (
        lambda: tiny_convnet(classes=5),
        affine(1, 0),
        4,
        "FILE: output 'y' FLOAT [N, 5] has 5 classes but the labels file has 4 labels",
    ),
    "dynamic_output_width_vs_labels": (
        lambda: tiny_convnet(classes="classes"),
        affine(1, 0),
        4,
        "FILE: the model outputs 5 classes but the labels file has 4 labels",
    ),
    "int32_input": (
        lambda: tiny_convnet(dtype="int32"),
        affine(1, 0),
        5,
        "FILE: unsupported input type INT32: the import path accepts float32, float16, uint8",
    ),
    "float64_input": (
        lambda: tiny_convnet(dtype="float64"),
        affine(1, 0),
        5,
        "FILE: unsupported input type DOUBLE: the import path accepts float32, float16, uint8",
    ),
    "dynamic_hw_without_size": (
        lambda: tiny_convnet(size="W", height="H"),
        affine(1, 0),
        5,
        "FILE: input 'x' has dynamic height/width; pass --size",
    ),
    "fixed_size_differs": (
        tiny_convnet,
        ImportOptions(name="m", size=32, normalisation=normalisation(scale=(1,))),
        5,
        "FILE: --size 32 but input 'x' FLOAT [N, 3, 16, 16] is fixed at 16x16: drop --size or "
        "pass --size 16",
    ),
    "not_square": (
        lambda: tiny_convnet(size=16, height=12),
        affine(1, 0),
        5,
        "FILE: input 'x' FLOAT [N, 3, 12, 16] is 12x16: only square inputs are supported "
        "(inferline's decoders centre-crop a square)",
    ),
    "nhwc_as_nchw": (
        lambda: tiny_convnet(layout="NHWC"),
        affine(1, 0),
        5,
        "FILE: input 'x' FLOAT [N, 16, 16, 3] has 16 channels at axis 1 (NCHW), not 3; its "
        "axis 3 is 3: pass --layout NHWC",
    ),
    "float_without_normalisation": (
        tiny_convnet,
        ImportOptions(name="m"),
        5,
        "FILE takes float32 input: say how 0-255 pixels are normalised, --mean R,G,B --std "
        "R,G,B (torchvision: (x/255 - mean)/std) or --scale S --offset O (x*S + O); --scale 1 "
        "--offset 0 keeps raw 0-255 values",
    ),
    "uint8_with_normalisation": (
        lambda: tiny_convnet(dtype="uint8"),
        affine(1, 0),
        5,
        "FILE takes uint8 pixels, which cannot be normalised on the way in: drop --mean/--std "
        "and --scale/--offset",
    ),
    "two_inputs": (
        two_inputs,
        affine(1, 0),
        5,
        "FILE has 2 inputs ('x', 'mask'); the import path takes exactly one image input",
    ),
    "batch_in_the_graph": (
        lambda: tiny_convnet(batch=1, reshape_to_batch=True),
        affine(1, 0),
        5,
        "FILE was exported with a fixed batch size of 1 and does not run with a batch of 3 once "
        "that axis is made dynamic (",  # ONNX Runtime's own words follow
    ),
    "probabilities_that_are_not": (
        tiny_convnet,
        ImportOptions(
            name="m", normalisation=normalisation(scale=(1,)), output_kind="probabilities"
        ),
        5,
        "FILE: --output-kind probabilities, but rows are not probabilities",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refuses_with_a_message_that_says_what_to_do(tmp_path: Path, case: str) -> None:
    make, options, labels, message = REFUSALS[case]
    got = refusal(tmp_path, make(), options, labels)
    if message.endswith(("(", "probabilities")):
        assert got.startswith(message), got
    else:
        assert got == message


def test_batch_refusal_says_how_to_export(tmp_path: Path) -> None:
    got = refusal(tmp_path, tiny_convnet(batch=1, reshape_to_batch=True), affine(1, 0))
    assert got.endswith(
        "export it with a dynamic batch axis, e.g. torch.onnx.export(..., dynamic_axes="
        "{'input': {0: 'batch'}, 'output': {0: 'batch'}}), or tf2onnx with a None batch dimension"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"mean": MEAN, "std": STD, "scale": (1.0,), "offset": (0.0,)},
            "--mean/--std and --scale/--offset both given: pass one normalisation, not both",
        ),
        ({"mean": MEAN}, "--mean and --std go together: pass both"),
        ({"mean": MEAN, "std": (0.2, 0.2)}, "--std takes 1 or 3 comma-separated values, got 2"),
    ],
)
def test_refuses_bad_normalisation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ModelImportError) as caught:
        normalisation(**kwargs)
    assert caught.value.render(ADD_FLAGS) == message


def test_refuses_non_square_size() -> None:
    with pytest.raises(ModelImportError) as caught:
        parse_size("224x256")
    assert caught.value.render(ADD_FLAGS) == (
        "--size 224x256: only square inputs are supported (inferline's decoders centre-crop a "
        "square); export the model for a square input"
    )


# The importer's words for a setting are its API's: what `add` says instead is the CLI's table.
CORE_TERMS: dict[str, tuple[Callable[[], object], str, str]] = {
    "std_length": (
        lambda: normalisation(mean=MEAN, std=(0.2, 0.2)),
        "std",
        "std takes 1 or 3 comma-separated values, got 2",
    ),
    "std_sign": (
        lambda: normalisation(mean=MEAN, std=(0.2, -0.2, 0.2)),
        "std",
        "std must be positive, got 0.2,-0.2,0.2",
    ),
    "mean_alone": (lambda: normalisation(mean=MEAN), "std", "mean and std go together: pass both"),
    "both_normalisations": (
        lambda: normalisation(mean=MEAN, std=STD, scale=(1.0,)),
        "normalisation",
        "mean/std and scale/offset both given: pass one normalisation, not both",
    ),
    "size_text": (lambda: parse_size("big"), "size", "size 'big': expected N or NxN, e.g. 224"),
    "max_batch_size": (
        lambda: ImportOptions(name="m", max_batch_size=0),
        "max_batch_size",
        "max_batch_size must be >= 1, got 0",
    ),
    "name": (
        lambda: ImportOptions(name="a b"),
        "name",
        "model name 'a b': use letters, digits, '_', '.' and '-', starting with a letter or digit",
    ),
}


@pytest.mark.parametrize("case", sorted(CORE_TERMS))
def test_the_importer_names_the_setting_in_its_own_terms(case: str) -> None:
    call, setting, message = CORE_TERMS[case]
    with pytest.raises(SettingError) as caught:
        call()
    assert caught.value.setting == setting
    assert str(caught.value) == message
    assert "--" not in message


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--std", "0.2,0.2", "--mean", "0.5"], "--std takes 1 or 3 comma-separated values, got 2"),
        (["--max-batch-size", "0", "--scale", "1"], "--max-batch-size must be >= 1, got 0"),
        (["--size", "big", "--scale", "1"], "--size 'big': expected N or NxN, e.g. 224"),
        (
            ["--scale", "1", "--output-kind", "probabilities"],
            "FILE: --output-kind probabilities, but rows are not probabilities",
        ),
        (
            ["--layout", "NHWC", "--scale", "1"],
            "FILE: input 'x' FLOAT [N, 3, 16, 16] has 16 channels at axis 3 (NHWC), not 3; its "
            "axis 1 is 3: pass --layout NCHW",
        ),
    ],
)
def test_the_command_names_the_flag_the_user_typed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    model = save(tiny_convnet(), tmp_path / "t.onnx")
    argv = ["add", "--onnx", str(model), "--labels", str(labels_file(tmp_path, 5)),
            "--name", "t", "--repository", str(tmp_path / "repo"), *flags]  # fmt: skip
    assert main(argv) == 1
    err = capsys.readouterr().err.replace(str(model), "FILE")
    assert err.startswith(f"error: {message}"), err
    assert not (tmp_path / "repo").exists()


def test_every_setting_has_a_flag_that_add_takes(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(ADD_FLAGS) == SETTINGS
    with pytest.raises(SystemExit):
        main(["add", "--help"])
    taken = set(FLAG.findall(capsys.readouterr().out))
    named = {flag for flags in ADD_FLAGS.values() for flag in FLAG.findall(flags)}
    assert len(named) == len(SETTINGS) - 1  # normalisation is set by the flags of its parts
    assert named <= taken, named - taken


def test_refuses_an_existing_name_without_force(tmp_path: Path) -> None:
    original = save(tiny_convnet(), tmp_path / "t.onnx")
    labels = labels_file(tmp_path, 5)
    import_classifier(original, labels, affine(1, 0), tmp_path / "repo")
    before = onnx_path(tmp_path / "repo", "m").read_bytes()
    with pytest.raises(ModelImportError) as caught:
        import_classifier(original, labels, affine(2, 0), tmp_path / "repo")
    assert isinstance(caught.value, SettingError) and caught.value.setting == "force"
    message = caught.value.render(ADD_FLAGS)
    assert message == f"model m exists in {tmp_path / 'repo'}; --force replaces it"
    assert onnx_path(tmp_path / "repo", "m").read_bytes() == before


@pytest.mark.parametrize("name", ["simulated_gpu", "../up", ".hidden", "a b"])
def test_refuses_names_triton_or_the_catalog_cannot_use(tmp_path: Path, name: str) -> None:
    original = save(tiny_convnet(), tmp_path / "t.onnx")
    with pytest.raises(ModelImportError, match="model name"):
        options = ImportOptions(name=name, normalisation=normalisation(scale=(1,)))
        import_classifier(original, labels_file(tmp_path, 5), options, tmp_path / "repo")
    assert not (tmp_path / "repo").exists()


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
