"""The models' metadata and configuration agree with each other as on a Triton server: the same
tensors, datatypes (TYPE_STRING is BYTES) and shapes (a batching model's metadata leads with -1)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from tritonclient.grpc import model_config_pb2

from middleman.models import MODEL, VIDEO_MODEL, describe

MODELS = (MODEL, "efficientnet_lite2", VIDEO_MODEL)

CLASSES, MAX_BATCH = 7, 12


def datatype(data_type: int) -> str:
    """Triton's metadata datatype for a config's data_type."""
    name = model_config_pb2.DataType.Name(data_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def described(tensors: Iterable[Any], batched: bool) -> list[tuple[str, str, list[int]]]:
    return [
        (t.name, datatype(t.data_type), ([-1] if batched else []) + list(t.dims)) for t in tensors
    ]


@pytest.mark.parametrize("model", MODELS)
def test_metadata_and_config_name_the_same_outputs(model: str) -> None:
    config = describe(model, CLASSES, MAX_BATCH).config()
    metadata = describe(model, CLASSES, MAX_BATCH).metadata()
    assert config.name == metadata.name == model
    assert metadata.versions == ["1"]
    outputs = [(t.name, t.datatype, list(t.shape)) for t in metadata.outputs]
    assert outputs == described(config.output, batched=config.max_batch_size > 0)
    assert [t.name for t in metadata.inputs] == [t.name for t in config.input]
    assert [t.datatype for t in metadata.inputs] == [datatype(t.data_type) for t in config.input]


def test_the_classifier_batches_up_to_max_batch_with_one_score_per_label() -> None:
    config = describe("classifier", CLASSES, MAX_BATCH).config()
    assert config.max_batch_size == MAX_BATCH
    assert [list(t.dims) for t in config.output] == [[CLASSES]]
    assert not config.model_transaction_policy.decoupled


def test_the_video_model_is_decoupled_and_unbatched_with_one_frame_per_response() -> None:
    config = describe(VIDEO_MODEL, CLASSES, MAX_BATCH).config()
    metadata = describe(VIDEO_MODEL, CLASSES, MAX_BATCH).metadata()
    assert config.max_batch_size == 0 and config.model_transaction_policy.decoupled
    inputs = [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs]
    assert inputs == described(config.input, batched=False) == [("VIDEO", "BYTES", [1])]
    assert ("PROBABILITIES", "FP32", [1, CLASSES]) in described(config.output, batched=False)
