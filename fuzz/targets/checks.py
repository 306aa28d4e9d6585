"""What the hops do with a ``ModelInferRequest`` they receive, for the KServe targets.

Every step either refuses with the project's own error (``InferError``; ``ValueError`` where
the caller turns that into INVALID_ARGUMENT: sampling and geometry parameters) or gives what its
contract says, which is asserted: an input's array has its declared shape and datatype, a batch
holds 1..max_batch encoded images, a response carries every requested output, and the batcher's
merge of a request with itself splits back into the request's own contents.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import numpy as np
from tritonclient.grpc import service_pb2

from batcher import batching
from inferline import kserve, preprocessing
from inferline.errors import InferError
from inferline.imaging.decode import Geometry
from inferline.imaging.video import Sampling
from middleman import inputs, outputs
from middleman.outputs import ClassifiedFrame
from preprocess import geometries
from preprocess import service as preprocess_service

IMAGE_OUTPUTS = (preprocessing.TENSOR, preprocessing.ERRORS)  # preprocess's image model

MAX_BATCH = 64  # middleman's and preprocess's default max_batch
TOP_K = 5  # middleman's default video_top_k
MAX_SAMPLES = 256  # the default cap on a video request's max_frames
CLASSES = 10
LABELS = [f"class {i}" for i in range(CLASSES)]

T = TypeVar("T")


def refused(call: Callable[[], T], *expected: type[Exception]) -> T | None:
    """``call()``, or None when it refuses with InferError (or one of ``expected``)."""
    try:
        return call()
    except InferError as exc:
        assert exc.message, "an InferError without a message"
        return None
    except expected:
        return None


def check_request(request: service_pb2.ModelInferRequest) -> None:
    """Every check a hop makes on ``request``, as middleman, preprocess and the batcher do."""
    check_tensors(request)
    check_middleman(request)
    check_preprocess(request)
    check_batcher(request)


def check_tensors(request: service_pb2.ModelInferRequest) -> None:
    for index, tensor in enumerate(request.inputs):
        array = refused(functools.partial(kserve.input_array, request, index))
        if array is None:
            continue
        assert array.shape == tuple(tensor.shape), f"{array.shape} != {list(tensor.shape)}"
        if tensor.datatype == "BYTES":
            assert array.dtype == np.object_
            assert all(isinstance(item, bytes) for item in array.flat)
        else:
            assert array.dtype == kserve.np_dtype(tensor.datatype)
    for key, value in kserve.parameters(request).items():
        assert isinstance(value, bool | int | float | str), (key, value)
    for output in request.outputs:
        count = refused(functools.partial(kserve.class_count, output))
        assert count is None or count >= 0


def check_middleman(request: service_pb2.ModelInferRequest) -> None:
    counts = refused(lambda: outputs.requested(request))
    images = refused(lambda: inputs.images(request, MAX_BATCH))
    if counts is not None and images is not None:
        assert 1 <= len(images) <= MAX_BATCH
        assert all(isinstance(image, bytes) for image in images)
        probabilities = np.linspace(0, 1, len(images) * CLASSES, dtype=np.float32)
        probabilities = probabilities.reshape(len(images), CLASSES)
        response = outputs.classifier_response(
            request.model_name, request.id, counts, probabilities, LABELS
        )
        for name, k in counts.items():
            shape = kserve.output_array(response, name).shape
            assert shape == (len(images), min(k, CLASSES) if k else CLASSES), (name, k, shape)
    video_counts = refused(lambda: outputs.video_requested(request, TOP_K))
    video = refused(lambda: inputs.video(request))
    if video_counts is not None and video is not None:
        assert isinstance(video, bytes)
        frame = ClassifiedFrame(0, 0.0, np.full(CLASSES, 0.1, np.float32), last=True)
        response = outputs.frame_response(request.id, video_counts, frame, LABELS)
        assert len(response.outputs) == len(video_counts)
    # What middleman and preprocess make of the sampling parameters of a video request.
    sampling = refused(
        lambda: Sampling().with_parameters(kserve.parameters(request), MAX_SAMPLES), ValueError
    )
    assert sampling is None or 1 <= sampling.max_samples <= MAX_SAMPLES


def check_preprocess(request: service_pb2.ModelInferRequest) -> None:
    parameters = kserve.parameters(request)
    geometry = refused(lambda: geometries.requested(parameters, Geometry()), ValueError)
    assert geometry is None or 0 < geometry.crop <= min(geometry.resize, geometries.MAX_CROP)
    refused(lambda: preprocess_service._requested(request, IMAGE_OUTPUTS))
    items = refused(lambda: kserve.find_batch(request, "IMAGE", "images", MAX_BATCH))
    assert items is None or 1 <= len(items) <= MAX_BATCH


def check_batcher(request: service_pb2.ModelInferRequest) -> None:
    """A request the batcher would batch, merged with itself, splits back into its own data."""
    plan = batching.plan(request, MAX_BATCH)
    if plan.key is None:
        return
    assert 1 <= plan.items <= MAX_BATCH
    merged = service_pb2.ModelInferRequest.FromString(batching.merge([request, request]))
    raw = request.SerializeToString()  # as the request arrived: its contents merged as views
    as_arrived = batching.merge([request, request], [raw, raw])
    assert service_pb2.ModelInferRequest.FromString(as_arrived) == merged
    assert len(merged.inputs) == len(merged.raw_input_contents) == len(request.inputs)
    own = [batching.raw_contents(request, i) for i in range(len(request.inputs))]
    for index, tensor in enumerate(merged.inputs):
        assert tensor.shape[0] == 2 * plan.items
        assert merged.raw_input_contents[index] == own[index] * 2
    # The upstream's answer: every merged input echoed as an output.
    response = service_pb2.ModelInferResponse(model_name=merged.model_name)
    for tensor, raw in zip(merged.inputs, merged.raw_input_contents, strict=True):
        response.outputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        response.raw_output_contents.append(raw)
    parts = batching.split(response, [plan.items, plan.items], ["a", "b"])
    for part in parts:
        assert [bytes(raw) for raw in part.raw_output_contents] == own
        for tensor, original in zip(part.outputs, request.inputs, strict=True):
            assert list(tensor.shape) == list(original.shape)
