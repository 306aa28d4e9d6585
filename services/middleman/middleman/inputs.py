"""What a request sends: its images, or its video, checked against the models' inputs.

Refusals are INVALID_ARGUMENT with a message that names the input and what it must be
(:mod:`inferline.kserve` reads and checks the tensors).
"""

from __future__ import annotations

from tritonclient.grpc import service_pb2

from inferline import kserve
from inferline.errors import invalid
from middleman.models import INPUT, INPUT_HINT, VIDEO_HINT, VIDEO_INPUT


def images(request: service_pb2.ModelInferRequest, max_batch: int) -> list[bytes]:
    """The encoded images of a ``classifier`` request: BYTES [N], 1 <= N <= ``max_batch``."""
    return kserve.find_batch(request, INPUT, INPUT_HINT, max_batch)


def video(request: service_pb2.ModelInferRequest) -> bytes:
    """The one encoded video of a ``classifier_video`` request: BYTES [1]."""
    array = kserve.find_input(request, VIDEO_INPUT, "BYTES", VIDEO_HINT)
    if array.shape != (1,):
        raise invalid(f"input {VIDEO_INPUT!r} must have shape [1]; got {list(array.shape)}")
    return bytes(array[0])
