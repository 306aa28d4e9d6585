"""python -m inferline_testing.fake_backend: a KServe v2 backend that says who it is.

    python -m inferline_testing.fake_backend --port 8001 --id triton-0 --delay-ms 5
    python -m inferline_testing.fake_backend --port 8002 --id triton-1 --fail unavailable

Answers ``ModelInfer`` for any model with zeros shaped like a classifier's output (``[N, 1]``
FP32 for each requested output, default ``PROBABILITIES``), after ``--delay-ms`` of
simulated work that takes no CPU, and puts its id in the response parameter ``backend``.
The model ``fake_backend_stats`` answers with its own statistics: ``ID`` (BYTES), ``REQUESTS``
(INT64, inference requests served), ``FIRST_REQUEST_UNIX`` (FP64, the wall-clock time of
its first inference request, 0 before it) and ``ITEMS`` (INT64, the rows of every inference
request's first input: the images a pool was asked for, retries included). ``--fail CODE``
answers every inference request with that status (after the delay), counted like the rest: a
replica that is up and healthy but failing, for the retry tests. Serves grpc.health.v1 and
stops gracefully on SIGTERM (NOT_SERVING, then the calls in flight finish), like every
inferline service. ``ModelConfig`` says every model batches up to ``--max-batch-size`` (64).

It stands in for Triton in the control-plane tests and benchmarks: no model to load, so a
replica starts in a fraction of a second, and which replica served a request is visible.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections import Counter
from collections.abc import Sequence

import grpc
import numpy as np
from tritonclient.grpc import service_pb2

from inferline import kserve, logs, tensors
from inferline.server import serve_until_signal
from inferline.servicer import Context, KServeServicer, serve

logger = logging.getLogger(__name__)

STATS_MODEL = "fake_backend_stats"
DEFAULT_OUTPUT = "PROBABILITIES"


class FakeBackendService(KServeServicer):
    server_name = "inferline-fake-backend"
    models = ()

    def __init__(
        self,
        backend_id: str,
        delay_s: float = 0.0,
        fail: grpc.StatusCode | None = None,
        max_batch_size: int = 64,
    ) -> None:
        self.backend_id = backend_id
        self.delay_s = delay_s
        self.fail = fail
        self.max_batch_size = max_batch_size
        self.requests = self.items = 0
        self.first_request_unix = 0.0
        self.attempts: Counter[bytes] = Counter()  # each BYTES item (an image): times asked

    def serves(self, name: str, version: str) -> bool:
        return True  # a fake backend answers for any model name

    async def ModelConfig(
        self, request: service_pb2.ModelConfigRequest, context: Context
    ) -> service_pb2.ModelConfigResponse:
        response = service_pb2.ModelConfigResponse()
        response.config.name, response.config.max_batch_size = request.name, self.max_batch_size
        return response

    async def ModelInfer(
        self, request: service_pb2.ModelInferRequest, context: Context
    ) -> service_pb2.ModelInferResponse:
        response = service_pb2.ModelInferResponse(
            model_name=request.model_name, model_version="1", id=request.id
        )
        response.parameters["backend"].string_param = self.backend_id
        if request.model_name == STATS_MODEL:
            kserve.add_output(response, "ID", np.array([self.backend_id.encode()], dtype=object))
            kserve.add_output(response, "REQUESTS", np.array([self.requests], dtype=np.int64))
            kserve.add_output(response, "ITEMS", np.array([self.items], dtype=np.int64))
            kserve.add_output(
                response, "FIRST_REQUEST_UNIX", np.array([self.first_request_unix], np.float64)
            )
            asked = list(self.attempts.items())
            kserve.add_output(response, "ASKED", np.array([a for a, _ in asked], dtype=object))
            kserve.add_output(response, "ATTEMPTS", np.array([n for _, n in asked], np.int64))
            return response
        if self.requests == 0:
            self.first_request_unix = time.time()
        self.requests += 1
        rows = request.inputs[0].shape[0] if request.inputs and request.inputs[0].shape else 1
        self.items += rows
        if request.inputs and request.inputs[0].datatype == "BYTES" and request.raw_input_contents:
            self.attempts.update(tensors.split_bytes(request.raw_input_contents[0]))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail is not None:
            await context.abort(
                self.fail, f"fake backend {self.backend_id} fails every call (--fail)"
            )
        names = [o.name for o in request.outputs] or [DEFAULT_OUTPUT]
        for name in names:
            kserve.add_output(response, name, np.zeros((rows, 1), np.float32))
        return response


async def main(args: argparse.Namespace) -> None:
    service = FakeBackendService(args.id, args.delay_ms / 1000, args.fail, args.max_batch_size)
    running = await serve("fake_backend", args.port, service, host=args.host)
    logger.info("fake backend %s ready on port %d", args.id, running.port)
    await serve_until_signal(running, args.grace_s)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m inferline_testing.fake_backend", description=__doc__
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--id", default="fake-backend")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="simulated work per request")
    parser.add_argument("--grace-s", type=float, default=5.0)
    parser.add_argument("--max-batch-size", type=int, default=64, help="what ModelConfig says")
    parser.add_argument(
        "--fail",
        type=lambda name: grpc.StatusCode[name.upper()],
        metavar="CODE",
        help="answer every inference with this gRPC status, e.g. unavailable",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    logs.setup()
    try:
        asyncio.run(main(parse_args(sys.argv[1:])))
    except OSError as exc:
        sys.exit(f"inferline_testing.fake_backend: {exc}")
