"""preprocess's models, each described once: the metadata and configuration derived from that
description are what the service has always answered (the tensors the service tests read), and
agree with each other as on a Triton server."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from preprocess.models import MODELS, describe, image_model, video_model

CROP, MAX_BATCH = 200, 17  # not the defaults: both come from the arguments


def metadata_tensors(tensors: Iterable[Any]) -> list[tuple[str, str, list[int]]]:
    return [(t.name, t.datatype, list(t.shape)) for t in tensors]


def config_tensors(tensors: Iterable[Any]) -> list[tuple[str, int, list[int]]]:
    return [(t.name, t.data_type, list(t.dims)) for t in tensors]


def test_preprocess_takes_a_batch_of_images_and_answers_tensors_and_errors() -> None:
    model = image_model(CROP, MAX_BATCH)
    metadata, config = model.metadata(), model.config()
    assert (metadata.name, list(metadata.versions), metadata.platform) == (
        "preprocess", ["1"], "inferline",
    )  # fmt: skip
    assert metadata_tensors(metadata.inputs) == [("IMAGE", "BYTES", [-1, 1])]
    assert metadata_tensors(metadata.outputs) == [
        ("TENSOR", "UINT8", [-1, 3, CROP, CROP]),
        ("ERRORS", "BYTES", [-1]),
    ]
    assert (config.name, config.platform, config.max_batch_size) == (
        "preprocess", "inferline", MAX_BATCH,
    )  # fmt: skip
    assert config_tensors(config.input) == [("IMAGE", mc.TYPE_STRING, [1])]
    assert config_tensors(config.output) == [
        ("TENSOR", mc.TYPE_UINT8, [3, CROP, CROP]),
        ("ERRORS", mc.TYPE_STRING, [1]),
    ]
    assert not config.HasField("model_transaction_policy")
    assert model.output_names == ("TENSOR", "ERRORS")  # what a request gets when it names none


def test_preprocess_video_streams_frames_with_their_positions_unbatched() -> None:
    model = video_model(CROP)
    metadata, config = model.metadata(), model.config()
    assert (metadata.name, list(metadata.versions)) == ("preprocess_video", ["1"])
    frames = [
        ("TENSOR", "UINT8", [-1, 3, CROP, CROP]),
        ("FRAME_INDEX", "INT64", [-1]),
        ("TIMESTAMP", "FP64", [-1]),
    ]
    assert metadata_tensors(metadata.inputs) == [("VIDEO", "BYTES", [1])]
    assert metadata_tensors(metadata.outputs) == frames
    assert config.max_batch_size == 0 and config.model_transaction_policy.decoupled
    assert config_tensors(config.input) == [("VIDEO", mc.TYPE_STRING, [1])]
    assert config_tensors(config.output) == [
        ("TENSOR", mc.TYPE_UINT8, [-1, 3, CROP, CROP]),
        ("FRAME_INDEX", mc.TYPE_INT64, [-1]),
        ("TIMESTAMP", mc.TYPE_FP64, [-1]),
    ]
    assert model.output_names == ("TENSOR", "FRAME_INDEX", "TIMESTAMP")


def test_every_served_model_is_described_under_its_own_name() -> None:
    assert MODELS == ("preprocess", "preprocess_video")
    described = describe(CROP, MAX_BATCH)
    assert tuple(described) == MODELS
    for name, model in described.items():
        assert model.name == model.metadata().name == model.config().name == name
