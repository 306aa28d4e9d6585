"""A proxyless gRPC client, run in a process of its own (gRPC reads its xDS bootstrap once per
process): ``python eds_proxyless_client.py xds:///triton 40 [sync|aio] [BACKENDS]`` sends 40
inferences on an ``xds:///`` target and prints which backend served how many, as JSON.

``sync``: tritonclient.grpc, as a user would. ``aio``: a bare ``grpc.aio`` channel with
Triton's protobuf messages, as the batcher's upstream does. ``BACKENDS`` (default 0): first
send inferences, not counted, until that many different backends have answered (every
subchannel connected: the event the count waits for), at most ``WARM_UP_LIMIT``.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from typing import NoReturn

import grpc
import numpy as np
import tritonclient.grpc as triton
from tritonclient.grpc import service_pb2

WARM_UP_LIMIT = 1000


def warm_up_failed(backends: int, seen: Counter[str]) -> NoReturn:
    sys.exit(f"only {dict(seen)} answered after {WARM_UP_LIMIT} calls; expected {backends}")


def with_tritonclient(target: str, count: int, backends: int) -> Counter[str]:
    client = triton.InferenceServerClient(target)

    def call() -> str:
        image = triton.InferInput("IMAGE", [1], "BYTES")
        image.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
        result = client.infer("classifier", [image], client_timeout=20)
        return str(result.get_response().parameters["backend"].string_param)

    seen: Counter[str] = Counter()
    while len(seen) < backends:
        seen[call()] += 1
        if seen.total() >= WARM_UP_LIMIT:
            warm_up_failed(backends, seen)
    served = Counter(call() for _ in range(count))
    client.close()
    return served


async def with_grpc_aio(target: str, count: int, backends: int) -> Counter[str]:
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

        async def call() -> str:
            response = await infer(request, timeout=20)
            return str(response.parameters["backend"].string_param)

        seen: Counter[str] = Counter()
        while len(seen) < backends:
            seen[await call()] += 1
            if seen.total() >= WARM_UP_LIMIT:
                warm_up_failed(backends, seen)
        return Counter([await call() for _ in range(count)])


def main() -> None:
    target, count = sys.argv[1], int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "sync"
    backends = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    if mode == "aio":
        served = asyncio.run(with_grpc_aio(target, count, backends))
    else:
        served = with_tritonclient(target, count, backends)
    print(json.dumps(dict(served)))


if __name__ == "__main__":
    main()
