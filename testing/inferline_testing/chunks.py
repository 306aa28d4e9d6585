"""A video sent in chunks over one ModelStreamInfer stream, as tritonclient sends it: the requests
of a sequence (``sequence_id``, ``sequence_start``, ``sequence_end``) and a stream that can hold
its last request back until the first result has arrived (the test fails if it never does).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import tritonclient.grpc.aio as triton
from tritonclient.grpc import service_pb2
from tritonclient.grpc._utils import _get_inference_request

Request = dict[str, Any]
TIMEOUT_S = 120.0


def request(
    model: str,
    data: bytes,
    sequence_id: int | str = 7,
    start: bool = False,
    end: bool = False,
    **parameters: Any,
) -> Request:
    """One chunk as ``stream_infer`` takes it."""
    tensor = triton.InferInput("VIDEO", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([data], dtype=np.object_))
    return {
        "model_name": model,
        "inputs": [tensor],
        "sequence_id": sequence_id,
        "sequence_start": start,
        "sequence_end": end,
        "parameters": parameters or None,
    }


def whole(model: str, data: bytes, **parameters: Any) -> Request:
    """A whole video in one request, without sequence parameters."""
    return {**request(model, data, **parameters), "sequence_id": 0}


def chunks(
    model: str, data: bytes, size: int, sequence_id: int | str = 7, **parameters: Any
) -> list[Request]:
    """``data`` as one sequence of ``size``-byte chunks: parameters on the first, sequence_end
    on the last."""
    pieces = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
    return [
        request(
            model,
            piece,
            sequence_id,
            i == 0,
            i == len(pieces) - 1,
            **(parameters if i == 0 else {}),
        )
        for i, piece in enumerate(pieces)
    ]


async def send(
    client: triton.InferenceServerClient,
    requests: list[Request],
    hold_last_until_a_result: bool = False,
    keep_open: bool = False,
    timeout_s: float = TIMEOUT_S,
    timings: dict[str, float] | None = None,
) -> list[triton.InferResult]:
    """Stream ``requests`` and collect the results (an error result fails the test).

    ``hold_last_until_a_result``: the last request is sent only once a result has arrived,
    which proves results come before the upload ends (TimeoutError after ``timeout_s``).
    ``keep_open``: the stream is not half-closed until the server has ended the call. A refusal
    is then the server's own status: grpc's aio client reports INTERNAL ("Internal error from
    Core") instead when one of its writes, or its half-close, races with the status arriving.
    ``timings`` gets seconds from the start: ``first_result_s``, ``held_back_s`` (all but the
    last request handed to gRPC), ``done_s``.
    """
    timings = {} if timings is None else timings
    start = time.perf_counter()
    first_result, ended = asyncio.Event(), asyncio.Event()
    withheld: list[int] = []  # the last request, never sent: no result came before it

    async def iterate() -> AsyncIterator[Request]:
        for index, item in enumerate(requests):
            if index == len(requests) - 1:
                timings["held_back_s"] = time.perf_counter() - start
            if hold_last_until_a_result and index == len(requests) - 1:
                try:
                    await asyncio.wait_for(first_result.wait(), timeout_s)
                except TimeoutError:
                    withheld.append(index)
                    raise
            yield item
        if keep_open:
            await asyncio.wait_for(ended.wait(), timeout_s)

    results = []
    try:
        async for result, error in client.stream_infer(iterate()):
            assert error is None, error
            results.append(result)
            if not first_result.is_set():
                timings["first_result_s"] = time.perf_counter() - start
            first_result.set()
    except BaseException as exc:
        if withheld:
            raise AssertionError(
                f"no result in {timeout_s:g} s while the last of {len(requests)} chunks was "
                "held back"
            ) from exc
        raise
    finally:
        ended.set()
    timings["done_s"] = time.perf_counter() - start
    return results


def finals(results: list[triton.InferResult]) -> list[bool]:
    """Each result's ``triton_final_response``."""
    return [r.get_response().parameters["triton_final_response"].bool_param for r in results]


def frame_indices(results: list[triton.InferResult]) -> list[int]:
    """FRAME_INDEX of every result, in order."""
    return [int(i) for r in results for i in r.as_numpy("FRAME_INDEX").ravel()]


def protobuf(request: Request) -> service_pb2.ModelInferRequest:
    """``request`` as the ModelInferRequest tritonclient sends, for the generated stub."""
    return _get_inference_request(
        model_name=request["model_name"],
        inputs=request["inputs"],
        model_version="",
        request_id="",
        outputs=request.get("outputs"),
        sequence_id=request.get("sequence_id", 0),
        sequence_start=request.get("sequence_start", False),
        sequence_end=request.get("sequence_end", False),
        priority=0,
        timeout=None,
        parameters=request.get("parameters"),
    )
