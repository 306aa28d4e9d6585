"""A model to bind into PyTriton: its name, infer callables (one per instance) and I/O."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from pytriton.model_config import ModelConfig, Tensor
from tritonclient.utils import triton_to_np_dtype

from inferline_models.repository import TensorSpec

# PyTriton's infer callable: a list of requests in, a list of {output name: array} out.
InferFunc = Callable[..., Any]


@dataclasses.dataclass(frozen=True)
class Binding:
    """Arguments for `Triton.bind`; one backend (ONNX Runtime, simulated GPU, ...) makes one."""

    name: str
    infer_funcs: Sequence[InferFunc]
    inputs: Sequence[Tensor]
    outputs: Sequence[Tensor]
    config: ModelConfig


def pytriton_tensor(spec: TensorSpec) -> Tensor:
    """A PyTriton tensor (shape without the batch axis) from a config.pbtxt tensor."""
    dtype = triton_to_np_dtype(spec.data_type.removeprefix("TYPE_"))
    if dtype is None:
        raise ValueError(f"tensor {spec.name!r}: unsupported data type {spec.data_type}")
    return Tensor(name=spec.name, dtype=np.dtype(dtype), shape=spec.dims)
