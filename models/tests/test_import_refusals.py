"""`python -m inferline_models add` refuses what it cannot serve, writing nothing: each refusal
names the file and what to do, in the flags the user typed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import onnx
import pytest

from inferline_models.__main__ import ADD_FLAGS
from inferline_models.import_settings import (
    ImportOptions,
    ModelImportError,
    SettingError,
    normalisation,
)
from inferline_models.importer import import_classifier
from inferline_models.repository import onnx_path
from inferline_testing.networks import tiny_convnet

from .import_support import affine, labels_file, save


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
