"""A model served here, described once; its ``ModelMetadata`` and ``ModelConfig`` derived from it.

Both follow Triton's rules, so a KServe or Triton client reads them as it reads a Triton
server's: a batching model (``max_batch`` > 0) states each tensor's shape per item in its
config (``dims``) and with a leading ``-1`` in its metadata; a model that does not batch states
the whole shape in both. A per-item scalar (``dims`` ``()``) is ``[-1]`` in the metadata and
``dims [1]`` in the config (Triton wants at least one dimension there). BYTES is the config's
``TYPE_STRING``. Plain protobuf messages; no transport here.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2, service_pb2

VERSION = "1"
PLATFORM = "inferline"

_Tensor = service_pb2.ModelMetadataResponse.TensorMetadata
_mc = model_config_pb2


@dataclass(frozen=True)
class Tensor:
    """One input or output: its name, KServe datatype (``BYTES``, ``UINT8``, ``FP32``...) and
    shape (per item when the model batches; -1 where it varies)."""

    name: str
    datatype: str
    dims: tuple[int, ...]

    def data_type(self) -> int:
        """The config's ``data_type`` (``TYPE_STRING`` for BYTES)."""
        name = "STRING" if self.datatype == "BYTES" else self.datatype
        return int(_mc.DataType.Value(f"TYPE_{name}"))


@dataclass(frozen=True)
class Model:
    """A model: ``max_batch`` 0 when it does not batch; ``decoupled`` when it answers a request
    with any number of responses (a stream)."""

    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    max_batch: int = 0
    decoupled: bool = False

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.outputs)

    def shape(self, tensor: Tensor) -> list[int]:
        """``tensor``'s shape in the metadata: a leading -1 when the model batches."""
        return [-1, *tensor.dims] if self.max_batch > 0 else list(tensor.dims)

    def metadata(self) -> service_pb2.ModelMetadataResponse:
        def tensors(
            described: tuple[Tensor, ...],
        ) -> list[service_pb2.ModelMetadataResponse.TensorMetadata]:
            return [
                _Tensor(name=t.name, datatype=t.datatype, shape=self.shape(t)) for t in described
            ]

        return service_pb2.ModelMetadataResponse(
            name=self.name,
            versions=[VERSION],
            platform=PLATFORM,
            inputs=tensors(self.inputs),
            outputs=tensors(self.outputs),
        )

    def config(self) -> model_config_pb2.ModelConfig:
        config = _mc.ModelConfig(
            name=self.name,
            platform=PLATFORM,
            max_batch_size=self.max_batch,
            input=[
                _mc.ModelInput(name=t.name, data_type=t.data_type(), dims=list(t.dims) or [1])
                for t in self.inputs
            ],
            output=[
                _mc.ModelOutput(name=t.name, data_type=t.data_type(), dims=list(t.dims) or [1])
                for t in self.outputs
            ],
        )
        if self.decoupled:
            config.model_transaction_policy.decoupled = True
        return config
