"""The models preprocess serves, each described once (:mod:`inferline.described`); their
``ModelMetadata`` and ``ModelConfig`` and the outputs a request may ask for come from here.

``preprocess``: ``IMAGE`` BYTES ``[N]`` -> ``TENSOR`` UINT8 ``[N, 3, crop, crop]`` and ``ERRORS``
BYTES ``[N]``, batched up to ``max_batch``. ``preprocess_video`` (decoupled, streamed):
``VIDEO`` BYTES ``[1]`` -> chunks of ``TENSOR`` UINT8 ``[k, 3, crop, crop]``, ``FRAME_INDEX``
INT64 ``[k]`` and ``TIMESTAMP`` FP64 ``[k]``. ``crop`` is the default geometry's. In the GPU pod
these two are served beside its Triton's models, whose descriptions are Triton's own.
"""

from __future__ import annotations

from inferline.described import Model, Tensor
from inferline.preprocessing import (
    ERRORS,
    FRAME_INDEX,
    IMAGE,
    MODEL,
    TENSOR,
    TIMESTAMP,
    VIDEO,
    VIDEO_MODEL,
)

MODELS = (MODEL, VIDEO_MODEL)
IMAGE_HINT = "BYTES [N, 1] or [N], each element one encoded JPEG, PNG, WebP, BMP or GIF file"
VIDEO_HINT = "BYTES [1], one whole mp4, mkv or webm file, or its next chunk"


def image_model(crop: int, max_batch: int) -> Model:
    """``preprocess``: a batch of encoded images -> their tensors and why any was refused."""
    return Model(
        MODEL,
        inputs=(Tensor(IMAGE, "BYTES", (1,)),),  # [N, 1], as Triton states a batch of BYTES
        outputs=(Tensor(TENSOR, "UINT8", (3, crop, crop)), Tensor(ERRORS, "BYTES", ())),
        max_batch=max_batch,
    )


def video_model(crop: int) -> Model:
    """``preprocess_video``: one video -> its sampled frames, streamed a chunk at a time."""
    return Model(
        VIDEO_MODEL,
        inputs=(Tensor(VIDEO, "BYTES", (1,)),),
        outputs=(
            Tensor(TENSOR, "UINT8", (-1, 3, crop, crop)),
            Tensor(FRAME_INDEX, "INT64", (-1,)),
            Tensor(TIMESTAMP, "FP64", (-1,)),
        ),
        decoupled=True,
    )


def describe(crop: int, max_batch: int) -> dict[str, Model]:
    """Every model of :data:`MODELS`, by name."""
    return {MODEL: image_model(crop, max_batch), VIDEO_MODEL: video_model(crop)}
