"""`--execution-provider`: the local Triton's ONNX Runtime on the CPU or, on an NVIDIA GPU, with
the CUDA or TensorRT execution provider.

Without onnxruntime-gpu and a GPU (CI, this project's usual machine) only the refusal and the
CPU path can run; the options TensorRT gets are checked against what config.pbtxt asks of the
official image. `make bench-gpu` exercises the GPU providers on a GPU machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from inferline_models import triton
from inferline_models.import_settings import ImportOptions, normalisation
from inferline_models.importer import import_classifier
from inferline_models.onnx_backend import (
    EXECUTION_PROVIDERS,
    OnnxRunner,
    missing_provider,
    onnx_binding,
    tensorrt_options,
)
from inferline_models.repository import (
    ModelSpec,
    TensorSpec,
    load_spec,
    onnx_path,
    tensorrt_parameters,
)
from inferline_testing.networks import tiny_convnet

MODEL = "tiny"
SIZE = 16
CLASSES = 5

no_cuda = pytest.mark.skipif(
    "CUDAExecutionProvider" in ort.get_available_providers(),
    reason="this ONNX Runtime has the CUDA provider: the refusal cannot be seen here",
)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with a few-kilobyte classifier on the wire contract (uint8 INPUT
    [b, 3, 16, 16] -> PROBS [b, 5]), imported as a user's model would be."""
    directory = tmp_path_factory.mktemp("provider")
    original = directory / "tiny.onnx"
    onnx.save_model(tiny_convnet(size=SIZE, classes=CLASSES), str(original))
    labels = directory / "labels.txt"
    labels.write_text("".join(f"class {i}\n" for i in range(CLASSES)), encoding="utf-8")
    options = ImportOptions(name=MODEL, normalisation=normalisation(mean=(0.5,), std=(0.25,)))
    import_classifier(original, labels, options, directory / "repo")
    return directory / "repo"


def test_cpu_provider_still_classifies(repository: Path) -> None:
    spec = load_spec(repository, MODEL)
    runner = OnnxRunner(onnx_path(repository, MODEL), spec, threads=1, provider="cpu")
    assert runner.providers == ("CPUExecutionProvider",)
    images = np.random.default_rng(0).integers(0, 256, (3, 3, SIZE, SIZE), dtype=np.uint8)
    probs = runner.infer(INPUT=images)["PROBS"]
    assert probs.shape == (3, CLASSES) and probs.dtype == np.float32
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    binding = onnx_binding(repository, MODEL, provider="cpu")
    assert binding.name == MODEL and binding.config.max_batch_size == 64


@no_cuda
@pytest.mark.parametrize("provider", ["cuda", "tensorrt"])
def test_gpu_provider_without_onnxruntime_gpu_is_refused_with_what_to_install(
    repository: Path, provider: str
) -> None:
    with pytest.raises(ValueError) as refused:
        onnx_binding(repository, MODEL, provider=provider)  # type: ignore[arg-type]
    message = str(refused.value)
    assert f"onnxruntime-gpu=={ort.__version__}" in message
    assert "a CUDA GPU" in message
    assert "available: " in message and "CPUExecutionProvider" in message
    assert missing_provider(provider) == message  # type: ignore[arg-type]
    assert missing_provider("cpu") is None


@no_cuda
def test_cli_exits_2_with_the_message_before_starting_triton(repository: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "inferline_models.triton", "--repository", str(repository),
         "--model", MODEL, "--execution-provider", "cuda", "--address", "127.0.0.1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "needs onnxruntime-gpu" in done.stderr


def test_tensorrt_options_mirror_config_pbtxt(tmp_path: Path) -> None:
    """What the official image's TensorRT accelerator gets, in ONNX Runtime's spelling: FP16,
    the same workspace, cached engines (under a local directory, not the pod's /tmp) and the
    one profile for batch 1..max_batch_size."""
    spec = load_spec_of_size(224, 64)
    options = tensorrt_options(spec, tmp_path)
    triton_side = tensorrt_parameters(64, 224)
    assert options == {
        "trt_fp16_enable": "True",
        "trt_max_workspace_size": triton_side["max_workspace_size_bytes"],
        "trt_engine_cache_enable": "True",
        "trt_engine_cache_path": str(tmp_path),
        "trt_timing_cache_enable": "True",
        "trt_timing_cache_path": str(tmp_path),
        "trt_profile_min_shapes": "INPUT:1x3x224x224",
        "trt_profile_opt_shapes": "INPUT:64x3x224x224",
        "trt_profile_max_shapes": "INPUT:64x3x224x224",
    }
    small = tensorrt_options(load_spec_of_size(SIZE, 8), tmp_path)
    assert small["trt_profile_max_shapes"] == f"INPUT:8x3x{SIZE}x{SIZE}"


def test_cli_choices_are_the_backends_providers() -> None:
    assert set(triton.EXECUTION_PROVIDERS) == set(EXECUTION_PROVIDERS)
    assert triton._parse_args([]).execution_provider == "cpu"
    args = triton._parse_args(["--execution-provider", "tensorrt", "--tensorrt-cache", "/x"])
    assert (args.execution_provider, args.tensorrt_cache) == ("tensorrt", Path("/x"))
    assert EXECUTION_PROVIDERS["tensorrt"] == (
        "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider",
    )  # fmt: skip
    assert EXECUTION_PROVIDERS["cuda"] == ("CUDAExecutionProvider", "CPUExecutionProvider")


def load_spec_of_size(size: int, max_batch_size: int) -> ModelSpec:
    """A repository classifier's spec: uint8 INPUT [3, size, size], PROBS [1000]."""
    return ModelSpec(
        name="m",
        max_batch_size=max_batch_size,
        inputs=(TensorSpec("INPUT", "TYPE_UINT8", (3, size, size)),),
        outputs=(TensorSpec("PROBS", "TYPE_FP32", (1000,)),),
    )
