"""The wire contract of decoding: the preprocess service, and the GPU pod's preprocess beside
Triton. Both sides (middleman, preprocess) and the test fakes import it; no gRPC here.

- model ``preprocess``: ``IMAGE`` BYTES ``[N]`` -> ``TENSOR`` UINT8 ``[N, 3, crop, crop]`` and
  ``ERRORS`` BYTES ``[N]`` (empty for a good image, the reason for a bad one);
- model ``preprocess_video`` (``ModelStreamInfer``): ``VIDEO`` BYTES ``[1]`` -> chunks of
  ``TENSOR``, ``FRAME_INDEX``, ``TIMESTAMP``, closed by an empty response whose parameter
  ``triton_final_response`` is true (Triton's decoupled-model convention);
- in the GPU pod, any model of its Triton: ``IMAGE`` BYTES ``[N]`` -> that model's outputs and
  ``ERRORS`` BYTES ``[N]``; the decoded batch reaches Triton through shared memory;
- in the GPU pod, ``preprocess_video`` with parameter ``infer_model`` naming one of its Triton's
  models: each chunk of frames is inferred there and answered as that model's outputs,
  ``FRAME_INDEX`` and ``TIMESTAMP`` (no ``TENSOR``): the frames never leave the pod.

Every request may carry the model's geometry as parameters ``resize`` (shorter side) and
``crop``; one that names none gets the service's default.
"""

from __future__ import annotations

from collections.abc import Sequence

from tritonclient.grpc import service_pb2

MODEL = "preprocess"
VIDEO_MODEL = "preprocess_video"
IMAGE = "IMAGE"  # BYTES [N] or [N, 1]: one encoded file per element
VIDEO = "VIDEO"  # BYTES [1]: a whole video file, or its next chunk
TENSOR = "TENSOR"  # UINT8 [N, 3, crop, crop]
ERRORS = "ERRORS"  # BYTES [N]: "" for a good image, else why it was refused
FRAME_INDEX = "FRAME_INDEX"  # INT64 [k]
TIMESTAMP = "TIMESTAMP"  # FP64 [k], seconds
RESIZE, CROP = "resize", "crop"  # request parameters: the geometry
INFER_MODEL = "infer_model"  # preprocess_video in the GPU pod: classify the frames with it
FINAL_RESPONSE = "triton_final_response"


def set_geometry(request: service_pb2.ModelInferRequest, resize: int, crop: int) -> None:
    """Tell the decoder a model's geometry (parameters ``resize`` and ``crop``)."""
    request.parameters[RESIZE].int64_param = resize
    request.parameters[CROP].int64_param = crop


def first_error(messages: Sequence[bytes]) -> tuple[int, str] | None:
    """The first refused image of an ``ERRORS`` output: (its index, why), or None."""
    for index, message in enumerate(messages):
        if message:
            return index, bytes(message).decode(errors="replace")
    return None
