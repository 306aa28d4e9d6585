"""A proxyless gRPC client, run in a process of its own (gRPC reads its xDS bootstrap once per
process): ``python eds_proxyless_client.py xds:///triton 40 [sync|aio]`` sends 40 inferences
on an ``xds:///`` target and prints which backend served how many, as JSON.

``sync``: tritonclient.grpc, as a user would. ``aio``: a bare ``grpc.aio`` channel with
Triton's protobuf messages, as the batcher's upstream does.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter

import grpc
import numpy as np
import tritonclient.grpc as triton
from tritonclient.grpc import service_pb2


def with_tritonclient(target: str, count: int) -> Counter[str]:
    client = triton.InferenceServerClient(target)
    served: Counter[str] = Counter()
    for _ in range(count):
        image = triton.InferInput("IMAGE", [1], "BYTES")
        image.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
        result = client.infer("classifier", [image], client_timeout=20)
        served[result.get_response().parameters["backend"].string_param] += 1
    client.close()
    return served


async def with_grpc_aio(target: str, count: int) -> Counter[str]:
    served: Counter[str] = Counter()
    async with grpc.aio.insecure_channel(target) as channel:
        infer = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=service_pb2.ModelInferRequest.SerializeToString,
            response_deserializer=service_pb2.ModelInferResponse.FromString,
        )
        request = service_pb2.ModelInferRequest(model_name="classifier")
        tensor = request.inputs.add()
        tensor.name, tensor.datatype = "IMAGE", "BYTES"
        tensor.shape.append(1)
        request.raw_input_contents.append(b"\x01\x00\x00\x00x")
        for _ in range(count):
            response = await infer(request, timeout=20)
            served[response.parameters["backend"].string_param] += 1
    return served


def main() -> None:
    target, count = sys.argv[1], int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "sync"
    if mode == "aio":
        served = asyncio.run(with_grpc_aio(target, count))
    else:
        served = with_tritonclient(target, count)
    print(json.dumps(dict(served)))


if __name__ == "__main__":
    main()
