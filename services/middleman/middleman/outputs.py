"""What a request asks back, and the responses: probabilities, or Triton's classification
extension (``class_count`` = k: the top k of each row as BYTES ``"score:index:label"``).

A request that names no output gets every output (an image model: the probabilities;
``classifier_video``: frame index, timestamp and the top ``video_top_k`` classes). An unknown
output or a bad ``class_count`` is INVALID_ARGUMENT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from tritonclient.grpc import service_pb2

from inferline import kserve
from inferline.described import VERSION
from inferline.errors import invalid
from middleman.models import FRAME_INDEX, OUTPUT, TIMESTAMP, VIDEO_MODEL, VIDEO_OUTPUTS

Counts = dict[str, int]  # output name -> class_count (0: the probabilities themselves)


@dataclass(frozen=True)
class ClassifiedFrame:
    index: int
    timestamp: float
    probabilities: npt.NDArray[np.float32]  # [classes]
    last: bool  # the video's last sampled frame


def requested(request: service_pb2.ModelInferRequest) -> Counts:
    """The outputs an image model's request asks for, with their class counts."""
    if not request.outputs:
        return {OUTPUT: 0}
    counts: Counts = {}
    for output in request.outputs:
        if output.name != OUTPUT:
            model = request.model_name
            raise invalid(f"unknown output {output.name!r}: model {model!r} has {OUTPUT!r}")
        counts[output.name] = kserve.class_count(output)
    return counts


def video_requested(request: service_pb2.ModelInferRequest, top_k: int) -> Counts:
    """The outputs a ``classifier_video`` request asks for; by default all three, with the top
    ``top_k`` classes."""
    if not request.outputs:
        return {FRAME_INDEX: 0, TIMESTAMP: 0, OUTPUT: top_k}
    counts: Counts = {}
    for output in request.outputs:
        if output.name not in VIDEO_OUTPUTS:
            names = ", ".join(repr(n) for n in VIDEO_OUTPUTS)
            raise invalid(f"unknown output {output.name!r}: model {VIDEO_MODEL!r} has {names}")
        counts[output.name] = kserve.class_count(output) if output.name == OUTPUT else 0
    return counts


def _add_probabilities(
    response: service_pb2.ModelInferResponse,
    name: str,
    k: int,
    probabilities: npt.NDArray[np.float32],
    labels: Sequence[str],
) -> None:
    """``probabilities`` [rows, classes] as they are (k = 0), or the top k of each row."""
    if k:
        kserve.add_output(response, name, kserve.classify(probabilities, k, labels))
    else:
        kserve.add_output(response, name, probabilities)


def classifier_response(
    model: str,
    request_id: str,
    counts: Mapping[str, int],
    probabilities: npt.NDArray[np.float32],
    labels: Sequence[str],
) -> service_pb2.ModelInferResponse:
    """The answer to image model ``model``'s request: ``probabilities`` is [N, classes]."""
    response = service_pb2.ModelInferResponse(
        model_name=model, model_version=VERSION, id=request_id
    )
    for name, k in counts.items():
        _add_probabilities(response, name, k, probabilities, labels)
    return response


def frame_response(
    request_id: str, counts: Mapping[str, int], frame: ClassifiedFrame, labels: Sequence[str]
) -> service_pb2.ModelInferResponse:
    """One streamed answer of ``classifier_video``; the last frame's says it is final."""
    response = service_pb2.ModelInferResponse(
        model_name=VIDEO_MODEL, model_version=VERSION, id=request_id
    )
    for name, k in counts.items():
        if name == FRAME_INDEX:
            kserve.add_output(response, name, np.array([frame.index], np.int64))
        elif name == TIMESTAMP:
            kserve.add_output(response, name, np.array([frame.timestamp], np.float64))
        else:
            _add_probabilities(response, name, k, frame.probabilities[np.newaxis], labels)
    response.parameters["triton_final_response"].bool_param = frame.last
    return response
