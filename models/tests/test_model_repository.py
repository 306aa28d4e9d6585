from pathlib import Path

import pytest

from inferline_models.repository import (
    MAX_BATCH_SIZE,
    ModelSpec,
    TensorSpec,
    load_spec,
    parse_config,
    render_config,
)

EXPECTED = ModelSpec(
    name="efficientnet_lite0",
    max_batch_size=MAX_BATCH_SIZE,
    inputs=(TensorSpec("INPUT", "TYPE_UINT8", (3, 224, 224)),),
    outputs=(TensorSpec("PROBS", "TYPE_FP32", (1000,)),),
)


def test_rendered_config_parses_back() -> None:
    text = render_config()
    assert parse_config(text) == EXPECTED
    assert 'platform: "onnxruntime_onnx"' in text
    assert 'label_filename: "labels.txt"' in text
    assert "max_queue_delay_microseconds" in text


def test_parse_triton_style_config() -> None:
    text = """
    name: "m"
    backend: "onnxruntime"
    max_batch_size: 8
    input [ { name: "x" data_type: TYPE_FP32 dims: [ -1, 4 ] } ]
    output [
      { name: "y" data_type: TYPE_INT64 dims: [ 2 ] },
      { name: "z", data_type: TYPE_STRING, dims: [ 1 ] }
    ]
    instance_group [ { count: 2 kind: KIND_CPU } ]
    """
    spec = parse_config(text)
    assert spec.name == "m"
    assert spec.max_batch_size == 8
    assert spec.inputs == (TensorSpec("x", "TYPE_FP32", (-1, 4)),)
    assert [o.name for o in spec.outputs] == ["y", "z"]
    assert spec.outputs[1].data_type == "TYPE_STRING"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("name: ", "invalid"),
        ("nme: 'x'", "invalid"),
        ('max_batch_size: 4 input [{name: "a"}] output [{name: "b"}]', "no model name"),
        ('name: "m" input [{name: "a"}]', "at least one input and output"),
    ],
)
def test_parse_rejects_bad_configs(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        parse_config(text)


def test_load_spec_checks_directory_name(tmp_path: Path) -> None:
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.pbtxt").write_text(render_config(), encoding="utf-8")
    with pytest.raises(ValueError, match="does not match its directory"):
        load_spec(tmp_path, "other")
    with pytest.raises(FileNotFoundError):
        load_spec(tmp_path, "missing")
