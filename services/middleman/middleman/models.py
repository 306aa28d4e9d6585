"""The models middleman serves, described as a Triton server describes its models.

``classifier`` (and every image classifier under its own name, :mod:`middleman.classifiers`):
input ``IMAGE`` BYTES, one encoded image per element, batched (``max_batch``) → output
``PROBABILITIES`` FP32 ``[N, classes]``. ``classifier_video`` (decoupled, streamed):
input ``VIDEO`` BYTES ``[1]`` (a whole file, or the next chunk of one, :mod:`inferline.sequence`)
→ one response per sampled frame with ``FRAME_INDEX``, ``TIMESTAMP`` and ``PROBABILITIES``.
Plain protobuf messages; no transport here.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2, service_pb2

MODEL = "classifier"  # the default image model's public name
VIDEO_MODEL = "classifier_video"
VERSION = "1"
PLATFORM = "inferline"

INPUT = "IMAGE"
VIDEO_INPUT = "VIDEO"
OUTPUT = "PROBABILITIES"
FRAME_INDEX = "FRAME_INDEX"
TIMESTAMP = "TIMESTAMP"
VIDEO_OUTPUTS = (FRAME_INDEX, TIMESTAMP, OUTPUT)

INPUT_HINT = "BYTES [N, 1] or [N], each element one encoded JPEG, PNG, WebP, BMP or GIF file"
VIDEO_HINT = "BYTES [1], one whole mp4, mkv or webm file, or its next chunk"

_Tensor = service_pb2.ModelMetadataResponse.TensorMetadata
_mc = model_config_pb2


def model_metadata(model: str, classes: int) -> service_pb2.ModelMetadataResponse:
    """``ModelMetadata`` of image model ``model`` or of ``classifier_video``, with ``classes``
    labels."""
    if model == VIDEO_MODEL:
        return service_pb2.ModelMetadataResponse(
            name=VIDEO_MODEL,
            versions=[VERSION],
            platform=PLATFORM,
            inputs=[_Tensor(name=VIDEO_INPUT, datatype="BYTES", shape=[1])],
            outputs=[
                _Tensor(name=FRAME_INDEX, datatype="INT64", shape=[1]),
                _Tensor(name=TIMESTAMP, datatype="FP64", shape=[1]),
                _Tensor(name=OUTPUT, datatype="FP32", shape=[1, classes]),
            ],
        )
    return service_pb2.ModelMetadataResponse(
        name=model,
        versions=[VERSION],
        platform=PLATFORM,
        inputs=[_Tensor(name=INPUT, datatype="BYTES", shape=[-1, 1])],  # as config's dims [1]
        outputs=[_Tensor(name=OUTPUT, datatype="FP32", shape=[-1, classes])],
    )


def model_config(model: str, classes: int, max_batch: int) -> model_config_pb2.ModelConfig:
    """``ModelConfig`` of ``model``: an image model batches up to ``max_batch`` images;
    ``classifier_video`` does not batch and is decoupled (any number of responses)."""
    if model == VIDEO_MODEL:
        return _mc.ModelConfig(
            name=VIDEO_MODEL,
            platform=PLATFORM,
            max_batch_size=0,
            input=[_mc.ModelInput(name=VIDEO_INPUT, data_type=_mc.TYPE_STRING, dims=[1])],
            output=[
                _mc.ModelOutput(name=FRAME_INDEX, data_type=_mc.TYPE_INT64, dims=[1]),
                _mc.ModelOutput(name=TIMESTAMP, data_type=_mc.TYPE_FP64, dims=[1]),
                _mc.ModelOutput(name=OUTPUT, data_type=_mc.TYPE_FP32, dims=[1, classes]),
            ],
            model_transaction_policy=_mc.ModelTransactionPolicy(decoupled=True),
        )
    return _mc.ModelConfig(
        name=model,
        platform=PLATFORM,
        max_batch_size=max_batch,
        input=[_mc.ModelInput(name=INPUT, data_type=_mc.TYPE_STRING, dims=[1])],
        output=[_mc.ModelOutput(name=OUTPUT, data_type=_mc.TYPE_FP32, dims=[classes])],
    )
