from pathlib import Path

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from inferline_models.repository import (
    CONFIG_FILE,
    MAX_BATCH_SIZE,
    ModelSpec,
    TensorSpec,
    load_spec,
    model_dir,
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


def test_gpu_instances_use_tensorrt() -> None:
    """The official Triton image runs the ONNX graph through ONNX Runtime's TensorRT provider."""
    config = text_format.Parse(render_config(), mc.ModelConfig())
    assert config.platform == "onnxruntime_onnx"
    assert not config.optimization.execution_accelerators.cpu_execution_accelerator
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt"
    assert dict(accelerator.parameters) == {
        "precision_mode": "FP16",
        "max_workspace_size_bytes": str(1 << 30),
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/var/cache/tensorrt",
        "trt_timing_cache_enable": "1",
        "trt_timing_cache_path": "/var/cache/tensorrt",
        "trt_profile_min_shapes": "INPUT:1x3x224x224",
        "trt_profile_opt_shapes": f"INPUT:{MAX_BATCH_SIZE}x3x224x224",
        "trt_profile_max_shapes": f"INPUT:{MAX_BATCH_SIZE}x3x224x224",
    }
    # Triton's ONNX Runtime backend (r24.10) fails the model load on a key it does not know.
    known = {
        "precision_mode", "max_workspace_size_bytes", "trt_engine_cache_enable",
        "trt_engine_cache_path", "trt_timing_cache_enable", "trt_timing_cache_path",
        "trt_profile_min_shapes", "trt_profile_opt_shapes", "trt_profile_max_shapes",
    }  # fmt: skip
    assert set(accelerator.parameters) <= known
    # No instance_group: Triton picks KIND_GPU where there is a GPU (the accelerator applies)
    # and KIND_CPU elsewhere (ignored), so one config serves both.
    assert not config.instance_group


def test_tensorrt_profile_follows_max_batch_size() -> None:
    config = text_format.Parse(render_config(max_batch_size=8), mc.ModelConfig())
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.parameters["trt_profile_max_shapes"] == "INPUT:8x3x224x224"
    assert accelerator.parameters["trt_profile_opt_shapes"] == "INPUT:8x3x224x224"


def test_config_follows_size_and_classes() -> None:
    text = render_config("m", 16, size=260, classes=10)
    assert parse_config(text) == ModelSpec(
        name="m",
        max_batch_size=16,
        inputs=(TensorSpec("INPUT", "TYPE_UINT8", (3, 260, 260)),),
        outputs=(TensorSpec("PROBS", "TYPE_FP32", (10,)),),
    )
    config = text_format.Parse(text, mc.ModelConfig())
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.parameters["trt_profile_min_shapes"] == "INPUT:1x3x260x260"
    assert accelerator.parameters["trt_profile_max_shapes"] == "INPUT:16x3x260x260"


def test_repository_config_is_current(model_repository: Path) -> None:
    """What `make model` wrote (and the models image ships) is today's config, TensorRT included."""
    written = (model_dir(model_repository) / CONFIG_FILE).read_text(encoding="utf-8")
    assert written == render_config(), (
        f"{model_repository}'s {CONFIG_FILE} is stale: "
        "python -m inferline_models --force rewrites it"
    )


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
