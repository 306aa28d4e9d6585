"""The models middleman serves, described as a Triton server describes its models.

``classifier`` (and every image classifier under its own name, :mod:`middleman.classifiers`):
input ``IMAGE`` BYTES, one encoded image per element, batched (``max_batch``) → output
``PROBABILITIES`` FP32 ``[N, classes]``. ``classifier_video`` (decoupled, streamed):
input ``VIDEO`` BYTES ``[1]`` (a whole file, or the next chunk of one, :mod:`inferline.sequence`)
→ one response per sampled frame with ``FRAME_INDEX``, ``TIMESTAMP`` and ``PROBABILITIES``.
Metadata and configuration both come from :func:`describe` (:mod:`inferline.described`).
"""

from __future__ import annotations

from inferline.described import Model, Tensor

MODEL = "classifier"  # the default image model's public name
VIDEO_MODEL = "classifier_video"

INPUT = "IMAGE"
VIDEO_INPUT = "VIDEO"
OUTPUT = "PROBABILITIES"
FRAME_INDEX = "FRAME_INDEX"
TIMESTAMP = "TIMESTAMP"
VIDEO_OUTPUTS = (FRAME_INDEX, TIMESTAMP, OUTPUT)

INPUT_HINT = "BYTES [N, 1] or [N], each element one encoded JPEG, PNG, WebP, BMP or GIF file"
VIDEO_HINT = "BYTES [1], one whole mp4, mkv or webm file, or its next chunk"


def describe(model: str, classes: int, max_batch: int) -> Model:
    """Image model ``model``, batching up to ``max_batch`` images, or ``classifier_video``
    (unbatched, decoupled: one response per frame), with ``classes`` labels."""
    if model == VIDEO_MODEL:
        return Model(
            VIDEO_MODEL,
            inputs=(Tensor(VIDEO_INPUT, "BYTES", (1,)),),
            outputs=(
                Tensor(FRAME_INDEX, "INT64", (1,)),
                Tensor(TIMESTAMP, "FP64", (1,)),
                Tensor(OUTPUT, "FP32", (1, classes)),
            ),
            decoupled=True,
        )
    return Model(
        model,
        inputs=(Tensor(INPUT, "BYTES", (1,)),),  # [N, 1], as Triton states a batch of BYTES
        outputs=(Tensor(OUTPUT, "FP32", (classes,)),),
        max_batch=max_batch,
    )
