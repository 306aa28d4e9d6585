"""KServe v2 requests as the tests build them: one BYTES input (encoded images, or any bytes) in
Triton's length-prefixed raw encoding, made by the pipeline's own :func:`inferline.tensors.
join_bytes` (one implementation of the wire format, not one per test)."""

from __future__ import annotations

from collections.abc import Sequence

from tritonclient.grpc import service_pb2

from inferline.tensors import join_bytes


def bytes_request(
    items: Sequence[bytes],
    model: str = "classifier",
    name: str = "IMAGE",
    shape: Sequence[int] | None = None,
    request_id: str = "",
) -> service_pb2.ModelInferRequest:
    """A ModelInferRequest for ``model`` with the BYTES input ``name`` holding ``items`` (shape
    ``[len(items)]`` unless given)."""
    request = service_pb2.ModelInferRequest(model_name=model, id=request_id)
    request.inputs.add(
        name=name, datatype="BYTES", shape=[len(items)] if shape is None else list(shape)
    )
    request.raw_input_contents.append(join_bytes(items))
    return request
