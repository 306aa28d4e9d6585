"""A model described once: its metadata and configuration follow Triton's rules for batching,
per-item scalars, BYTES and decoupled models."""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from inferline.described import Model, Tensor

SCORES = Tensor("SCORES", "FP32", (10,))
LABEL = Tensor("LABEL", "BYTES", ())  # one per item


def test_a_batching_model_states_shapes_per_item_in_its_config_and_batched_in_its_metadata() -> (
    None
):
    model = Model("m", inputs=(SCORES,), outputs=(LABEL,), max_batch=8)
    metadata, config = model.metadata(), model.config()
    assert [(t.datatype, list(t.shape)) for t in metadata.inputs] == [("FP32", [-1, 10])]
    assert [(t.datatype, list(t.shape)) for t in metadata.outputs] == [("BYTES", [-1])]
    assert [(t.data_type, list(t.dims)) for t in config.input] == [(mc.TYPE_FP32, [10])]
    assert [(t.data_type, list(t.dims)) for t in config.output] == [(mc.TYPE_STRING, [1])]
    assert config.max_batch_size == 8 and not config.model_transaction_policy.decoupled


def test_a_model_that_does_not_batch_states_its_whole_shapes_in_both() -> None:
    model = Model("s", inputs=(SCORES,), outputs=(SCORES,), decoupled=True)
    metadata, config = model.metadata(), model.config()
    assert [list(t.shape) for t in metadata.outputs] == [list(t.dims) for t in config.output]
    assert [list(t.shape) for t in metadata.outputs] == [[10]]
    assert config.max_batch_size == 0 and config.model_transaction_policy.decoupled
