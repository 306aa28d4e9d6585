"""Serve an ONNX model of the repository with ONNX Runtime on the CPU."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
from pytriton.decorators import batch
from pytriton.model_config import DynamicBatcher, ModelConfig

from inferline_models.binding import Binding, InferFunc, pytriton_tensor
from inferline_models.repository import MAX_QUEUE_DELAY_US, ModelSpec, load_spec, onnx_path

logger = logging.getLogger(__name__)


def default_threads() -> int:
    """CPU cores this process may use."""
    return len(os.sched_getaffinity(0)) or 1


class OnnxRunner:
    """One ONNX Runtime session; `infer(**inputs)` maps input arrays to output arrays."""

    def __init__(self, path: Path, spec: ModelSpec, threads: int) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Idle worker threads spinning for work would take cores from the co-located services.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        have = (
            {i.name for i in self._session.get_inputs()},
            {o.name for o in self._session.get_outputs()},
        )
        want = {t.name for t in spec.inputs}, {t.name for t in spec.outputs}
        if have != want:
            raise ValueError(f"{path}: inputs/outputs {have} do not match config.pbtxt {want}")
        self._outputs = [t.name for t in spec.outputs]

    def infer(self, **inputs: npt.NDArray[np.generic]) -> dict[str, npt.NDArray[np.generic]]:
        results = self._session.run(self._outputs, inputs)
        return dict(zip(self._outputs, results, strict=True))


def onnx_binding(
    repository: Path,
    model: str,
    *,
    instances: int = 1,
    threads: int | None = None,
    max_queue_delay_us: int = MAX_QUEUE_DELAY_US,
) -> Binding:
    """The repository's ONNX model as a PyTriton binding with Triton's dynamic batcher on."""
    spec = load_spec(repository, model)
    path = onnx_path(repository, model)
    threads = threads or default_threads()
    infer_funcs: list[InferFunc] = [
        batch(OnnxRunner(path, spec, threads).infer) for _ in range(instances)
    ]
    logger.info(
        "loaded %s (%d instance(s), %d ONNX Runtime thread(s) each, max_batch_size %d)",
        path,
        instances,
        threads,
        spec.max_batch_size,
    )
    return Binding(
        name=spec.name,
        infer_funcs=infer_funcs,
        inputs=[pytriton_tensor(t) for t in spec.inputs],
        outputs=[pytriton_tensor(t) for t in spec.outputs],
        config=ModelConfig(
            batching=spec.max_batch_size > 0,
            max_batch_size=spec.max_batch_size,
            batcher=DynamicBatcher(max_queue_delay_microseconds=max_queue_delay_us),
        ),
    )
