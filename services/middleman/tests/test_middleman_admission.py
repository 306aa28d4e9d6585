"""Admission at middleman, in front of fake upstreams: what exceeds the bounds, or would not finish
within its deadline at the measured throughput, is refused at once with a status and a message a
person can act on, and never reaches an upstream; the public message limit is exact."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from prometheus_client import REGISTRY
from tritonclient.grpc import service_pb2

from inferline_testing.waits import wait_for_state

from .conftest import Fake, MakeMiddleman, bytes_request, call, rpc_error

IMAGES = [b"first image", b"second image"]
WAIT_S = 30.0


def refused(reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "inferline_middleman_refused_requests_total", {"model": "classifier", "reason": reason}
    )
    return value or 0.0


async def test_beyond_max_inflight_is_refused_at_once_and_never_sent_on(
    make_middleman: MakeMiddleman, fake_preprocess: Fake
) -> None:
    url = await make_middleman(max_inflight=2, admission_floor=100)
    fake_preprocess.servicer.gate.clear()
    held = [
        asyncio.ensure_future(call(url, bytes_request(IMAGES), deadline_s=10.0)) for _ in range(2)
    ]
    await wait_for_state(lambda: len(fake_preprocess.servicer.calls) == 2, WAIT_S, "2 decoding")
    before = refused("requests")
    start = time.perf_counter()
    error = await rpc_error(url, bytes_request(IMAGES))
    print(f"refused in {(time.perf_counter() - start) * 1000:.1f} ms")
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "2 requests are in flight" in (error.details() or "")
    assert "INFERLINE_MIDDLEMAN_MAX_INFLIGHT=2" in (error.details() or "")
    assert refused("requests") == before + 1
    assert len(fake_preprocess.servicer.calls) == 2  # the refused one never went on
    fake_preprocess.servicer.gate.set()
    answers = await asyncio.gather(*held)
    assert all(a.outputs for a in answers)  # the admitted ones were not harmed
    await call(url, bytes_request(IMAGES), deadline_s=10.0)  # and there is room again


async def test_beyond_max_inflight_bytes_is_refused(
    make_middleman: MakeMiddleman, fake_preprocess: Fake
) -> None:
    url = await make_middleman(max_inflight_bytes=40, admission_floor=100)
    fake_preprocess.servicer.gate.clear()
    held = asyncio.ensure_future(call(url, bytes_request([b"x" * 30])))
    await wait_for_state(lambda: len(fake_preprocess.servicer.calls) == 1, WAIT_S, "decoding")
    error = await rpc_error(url, bytes_request([b"y" * 11]))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "41 bytes would be in flight" in (error.details() or "")
    assert "INFERLINE_MIDDLEMAN_MAX_INFLIGHT_BYTES=40" in (error.details() or "")
    fake_preprocess.servicer.gate.set()
    await held


async def test_what_would_not_finish_in_time_is_refused_and_the_rest_is_answered(
    make_middleman: MakeMiddleman, fake_preprocess: Fake
) -> None:
    url = await make_middleman(admission_floor=0, max_inflight=10_000)
    for _ in range(20):  # a throughput to measure: 40 items, fast
        await call(url, bytes_request(IMAGES), deadline_s=10.0)
    fake_preprocess.servicer.gate.clear()
    before = refused("load")
    admitted: list[asyncio.Future[service_pb2.ModelInferResponse]] = []
    error = None
    for _ in range(5000):  # with the upstream stalled, the estimate soon says "too late"
        call_ = asyncio.ensure_future(call(url, bytes_request(IMAGES), deadline_s=2.0))
        done, _ = await asyncio.wait([call_], timeout=0.05)
        if done and call_.exception() is not None:
            error = call_.exception()
            break
        admitted.append(call_)
    assert isinstance(error, grpc.aio.AioRpcError), "nothing was refused"
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "items/s would take" in (error.details() or ""), error.details()
    assert refused("load") == before + 1
    assert len(fake_preprocess.servicer.calls) == 20 + len(admitted)
    fake_preprocess.servicer.gate.set()
    answers = await asyncio.gather(*admitted)
    assert len(answers) == len(admitted)


@pytest.mark.parametrize("over", [0, 1], ids=["at the limit", "one byte over"])
async def test_the_public_message_limit_is_exact_and_named(
    make_middleman: MakeMiddleman, fake_preprocess: Fake, over: int
) -> None:
    limit = 4096
    url = await make_middleman(
        max_message_bytes=limit, max_image_bytes=limit - 1, max_video_bytes=limit - 1
    )
    request = bytes_request([b"an image"])
    request.id = "x" * (limit + over - request.ByteSize() - 1)  # one length byte more for id
    request.id += "x" * (limit + over - request.ByteSize())
    assert request.ByteSize() == limit + over
    if not over:
        await call(url, request)
        return
    error = await rpc_error(url, request)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert (error.details() or "") == (
        f"the request is {limit + 1} bytes, over the limit of {limit} "
        "(INFERLINE_MIDDLEMAN_MAX_MESSAGE_BYTES): send fewer or smaller images per request"
    )
    assert fake_preprocess.servicer.calls == []
