"""The wrapped model's trial run: ONNX Runtime (CPU) on random pixels, before anything is written.

:func:`detect_output_kind` tells probabilities from logits on the bare wrapping;
:func:`check_runs` runs the finished model on a batch of 2 and refuses what does not answer
finite probabilities, one row per image and one column per label.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as ort_errors

from inferline_models.import_settings import ModelImportError, SettingError
from inferline_models.onnx_graph import Network
from inferline_models.repository import INPUT_NAME, OUTPUT_NAME
from inferline_models.wrapping import Preprocessing, wrap_classifier

SUM_TOLERANCE = 1e-3  # |row sum - 1| of a probabilities output
_ORT_ERRORS: tuple[type[Exception], ...] = (
    ort_errors.Fail,
    ort_errors.InvalidArgument,
    ort_errors.InvalidGraph,
    ort_errors.NotImplemented,
    ort_errors.RuntimeException,
    RuntimeError,
    ValueError,
)


def detect_output_kind(network: Network, pre: Preprocessing) -> Literal["probabilities", "logits"]:
    """Probabilities when every row of a few random images is non-negative and sums to 1."""
    bare = wrap_classifier(network.model, pre, softmax=False)
    scores = _run(network, bare, _pixels(3, pre.size, seed=1))
    sums = scores.sum(axis=1)
    probabilities = bool(
        np.all(np.isfinite(scores))
        and np.all(scores >= 0)
        and np.all(np.abs(sums - 1) <= SUM_TOLERANCE)
    )
    return "probabilities" if probabilities else "logits"


def check_runs(network: Network, model: onnx.ModelProto, labels: int) -> None:
    """A batch of 2 answers two rows of ``labels`` finite probabilities."""
    size = _size_of(model)
    probs = _run(network, model, _pixels(2, size, seed=0))
    if probs.ndim != 2 or probs.shape[0] != 2:
        raise ModelImportError(
            f"{network.path}: the wrapped model answers shape {list(probs.shape)} for a batch of "
            f"2; expected [2, {labels}]"
        )
    if probs.shape[1] != labels:
        raise ModelImportError(
            f"{network.path}: the model outputs {probs.shape[1]} classes but the labels file has "
            f"{labels} labels"
        )
    if not np.all(np.isfinite(probs)):
        raise ModelImportError(f"{network.path}: the model answers NaN or infinite scores")
    worst = float(np.max(np.abs(probs.sum(axis=1) - 1)))
    if worst > SUM_TOLERANCE or np.any(probs < 0):
        raise SettingError(
            "output_kind",
            "{path}: {output_kind} probabilities, but rows are not probabilities (|sum - 1| up "
            "to {worst:.3g}, min {least:.3g}): pass {output_kind} logits (or auto)",
            path=network.path,
            worst=worst,
            least=float(probs.min()),
        )


def _run(network: Network, model: onnx.ModelProto, pixels: npt.NDArray[np.uint8]) -> Any:
    options = ort.SessionOptions()
    options.log_severity_level = 4  # a failure is reported below, in words of our own
    try:
        session = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
        (scores,) = session.run([OUTPUT_NAME], {INPUT_NAME: pixels})
    except _ORT_ERRORS as exc:
        if network.fixed_batch is not None:
            raise ModelImportError(
                f"{network.path} was exported with a fixed batch size of {network.fixed_batch} "
                f"and does not run with a batch of {len(pixels)} once that axis is made dynamic "
                f"({_first_line(exc)}): export it with a dynamic batch axis, e.g. "
                "torch.onnx.export(..., dynamic_axes={'input': {0: 'batch'}, 'output': "
                "{0: 'batch'}}), or tf2onnx with a None batch dimension"
            ) from exc
        raise ModelImportError(
            f"{network.path}: ONNX Runtime cannot run the wrapped model on a batch of "
            f"{len(pixels)}: {_first_line(exc)}"
        ) from exc
    return np.asarray(scores, dtype=np.float32)


def _pixels(batch: int, size: int, seed: int) -> npt.NDArray[np.uint8]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(batch, 3, size, size), dtype=np.uint8)


def _size_of(model: onnx.ModelProto) -> int:
    (graph_input,) = model.graph.input
    return int(graph_input.type.tensor_type.shape.dim[2].dim_value)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
