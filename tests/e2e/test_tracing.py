"""One request's trace across every process of the default stack (the real Envoy, middleman,
the batcher dialled proxyless, the GPU pod's preprocess), each exporting over OTLP/HTTP with
its real exporter to a receiver (:mod:`inferline_testing.otlp`): the services through the
OpenTelemetry SDK, Envoy through its own OpenTelemetry tracer, every ~5 s.

The stack samples nothing of its own (``parentbased_always_off``): a client's ``traceparent``
decides, at any ratio. Triton serves the *simulated* GPU model, and sends its own spans (JSON
over OTLP/HTTP) when the GPU pod passes a sampled batch's context on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Iterator
from typing import Any
from unittest import mock

import numpy as np
import pytest
import tritonclient.grpc.aio as triton

from demo_client.transports import HTTP
from inferline_stack.config import StackConfig
from inferline_testing import media
from inferline_testing.otlp import Received, Receiver, receiver
from inferline_testing.stacks import own_stack
from inferline_testing.traced import classify, unsampled
from inferline_testing.waits import wait_for_state

pytestmark = pytest.mark.e2e

WAIT_S = 30.0
INFER = "inference.GRPCInferenceService/ModelInfer"
SAMPLED: set[str] = set()  # every trace the tests ask for, whichever test runs first


def sampled_trace() -> str:
    trace_id = secrets.token_hex(16)
    SAMPLED.add(trace_id)
    return trace_id


@pytest.fixture(scope="module")
def traced_stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[StackConfig, Receiver]]:
    with receiver() as (found, endpoint):
        environ = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
            "OTEL_TRACES_SAMPLER": "parentbased_always_off",
            "OTEL_BSP_SCHEDULE_DELAY": "50",  # ms: spans leave at once, for the test's sake
            # What a backend may ask of every export (a key; the project spans go to)
            "OTEL_EXPORTER_OTLP_HEADERS": f"{found.header}=stack",
        }
        with (
            mock.patch.dict(os.environ, environ),
            own_stack(
                tmp_path_factory.mktemp("tracing"), "tracing", model="simulated_gpu"
            ) as config,
        ):
            yield config, found


def one(spans: list[Received], service: str, name: str) -> Received:
    found = [s for s in spans if s.service == service and s.span.name == name]
    assert len(found) == 1, (service, name, [(s.service, s.span.name) for s in spans])
    return found[0]


async def test_a_sampled_request_is_one_trace_across_every_process(
    traced_stack: tuple[StackConfig, Receiver],
) -> None:
    config, found = traced_stack
    unsampled, sampled = secrets.token_hex(16), sampled_trace()
    caller = secrets.token_hex(8)
    await classify(config, f"00-{unsampled}-{caller}-00")  # the client says: not this one
    await classify(config, f"00-{sampled}-{caller}-01")

    names = {"envoy", "middleman", "batcher", "preprocess"}
    wanted = {
        ("envoy", "middleman"), ("middleman", INFER), ("batcher", INFER),
        ("batcher", "batch simulated_gpu"), ("preprocess", INFER), ("preprocess", "decode"),
        ("preprocess", "infer"),
    }  # fmt: skip

    def arrived() -> bool:  # each exporter sends on its own schedule (Envoy's every 5 s)
        seen = [(s.service, s.span.name) for s in found.of_trace(sampled)]
        return wanted <= set(seen) and sum(1 for s, _ in seen if s == "envoy") >= 2

    await wait_for_state(
        arrived, WAIT_S, "the sampled request's spans from Envoy, middleman, the batcher, the pod"
    )
    spans = found.of_trace(sampled)
    front = one(spans, "envoy", "middleman")  # Envoy's span of its hop, named for it
    middleman = one(spans, "middleman", INFER)
    batcher = one(spans, "batcher", INFER)
    batch = one(spans, "batcher", "batch simulated_gpu")
    pod = one(spans, "preprocess", INFER)
    decode = one(spans, "preprocess", "decode")
    infer = one(spans, "preprocess", "infer")
    assert front.parent_id == caller  # Envoy's front door, as the client sent it
    assert middleman.parent_id == front.span_id
    assert batcher.parent_id == middleman.span_id  # proxyless: no Envoy between
    assert batch.parent_id == batcher.span_id
    assert [link.span_id.hex() for link in batch.span.links] == [batcher.span_id]
    [pool] = [s for s in spans if s.service == "envoy" and s.parent_id == batch.span_id]
    assert pool.span.name in {"triton", "preprocess"}  # the GPU pool's hop
    assert pod.parent_id == pool.span_id
    assert decode.parent_id == pod.span_id and infer.parent_id == pod.span_id
    assert batcher.attribute("inferline.batch.items") == 1
    assert decode.attribute("inferline.images") == 1
    for span in (middleman, batcher, pod):
        assert span.attribute("rpc.grpc.status_code") == 0
    assert front.attribute("grpc.path") == "/" + INFER
    # Nothing else was sent: not the unsampled request's spans (never made: nothing waits on
    # their absence), nor the stack's own calls, nor PyTriton's spans around the Python model
    # (made and dropped: its tracer would send them for every call, each a trace of its own).
    assert {s.trace_id for s in found.spans} <= SAMPLED
    assert not [s for s in found.spans if s.span.name.startswith(("pytriton", "proxy_"))]
    # Every exporter sent the environment's headers: the SDK's, Envoy's (the renderer's
    # otlp_headers), Triton's (opentelemetry-cpp reads the variable itself).
    exported = {service for services, _ in found.exports for service in services}
    assert exported >= names
    assert {value for _, value in found.exports} == {"stack"}


async def test_tritons_own_spans_join_the_pods_call(
    traced_stack: tuple[StackConfig, Receiver],
) -> None:
    # Triton exports by itself (opentelemetry-cpp, JSON), each request's spans once it releases
    # the request: with the Python backend, when its next request comes. So unsampled requests
    # follow the sampled one until its spans are in (on an idle pod they would wait for traffic).
    config, found = traced_stack
    sampled = sampled_trace()
    await classify(config, f"00-{sampled}-{secrets.token_hex(8)}-01")

    async def traffic() -> None:
        while True:
            await classify(config, unsampled())
            await asyncio.sleep(0.2)

    follow = asyncio.create_task(traffic())
    try:
        wanted = {("triton", "InferRequest"), ("triton", "simulated_gpu"), ("preprocess", "infer")}
        await wait_for_state(
            lambda: wanted <= {(s.service, s.span.name) for s in found.of_trace(sampled)},
            WAIT_S,
            "Triton's spans of the sampled request, and the pod's call they join",
        )
    finally:
        follow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow
    spans = found.of_trace(sampled)
    infer = one(spans, "preprocess", "infer")
    triton = one(spans, "triton", "InferRequest")  # Triton's own, joined to the pod's call
    model = one(spans, "triton", "simulated_gpu")
    assert triton.parent_id == infer.span_id and model.parent_id == triton.span_id
    assert model.attribute("triton.model_name") == "simulated_gpu"
    assert {value for services, value in found.exports if "triton" in services} == {"stack"}


async def test_a_rest_request_is_traced_from_its_traceparent_header(
    traced_stack: tuple[StackConfig, Receiver],
) -> None:
    config, found = traced_stack
    sampled, caller = sampled_trace(), secrets.token_hex(8)
    await classify(config, f"00-{sampled}-{caller}-01", HTTP)
    route = "POST /v2/models/{model}/infer"
    wanted = {("middleman", route), ("batcher", INFER), ("envoy", "middleman")}
    await wait_for_state(
        lambda: wanted <= {(s.service, s.span.name) for s in found.of_trace(sampled)},
        WAIT_S,
        "the REST request's spans from Envoy, middleman and the batcher",
    )
    spans = found.of_trace(sampled)
    rest = one(spans, "middleman", route)
    batcher = one(spans, "batcher", INFER)
    front = one(spans, "envoy", "middleman")
    assert front.parent_id == caller
    assert rest.parent_id == front.span_id
    assert rest.attribute("http.response.status_code") == 200
    assert batcher.parent_id == rest.span_id


async def test_a_video_is_one_span_with_an_event_per_frame(
    traced_stack: tuple[StackConfig, Receiver],
) -> None:
    config, found = traced_stack
    sampled, caller = sampled_trace(), secrets.token_hex(8)
    video = media.make_video("mpeg4_mp4", media.video_frames(8, 64, 48))

    async def requests() -> AsyncIterator[dict[str, Any]]:
        tensor = triton.InferInput("VIDEO", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([video], dtype=np.object_))
        yield {"model_name": "classifier_video", "inputs": [tensor], "parameters": {"every_n": 2}}

    indices = []
    async with triton.InferenceServerClient(f"127.0.0.1:{config.public_port}") as client:
        traceparent = {"traceparent": f"00-{sampled}-{caller}-01"}
        async for result, error in client.stream_infer(requests(), headers=traceparent):
            assert error is None, error
            indices.append(int(result.as_numpy("FRAME_INDEX")[0]))
    await wait_for_state(
        lambda: (
            {"video", "inference.GRPCInferenceService/ModelStreamInfer"}
            <= {s.span.name for s in found.of_trace(sampled) if s.service == "middleman"}
        ),
        WAIT_S,
        "the video's span and its stream's",
    )
    spans = found.of_trace(sampled)
    stream = one(spans, "middleman", "inference.GRPCInferenceService/ModelStreamInfer")
    upload = one(spans, "middleman", "video")
    assert upload.parent_id == stream.span_id
    assert upload.attribute("inferline.video.chunked") is False
    events = upload.span.events
    assert [e.name for e in events] == ["frame"] * len(indices) and len(indices) > 1
    frames = [next(a.value.int_value for a in e.attributes if a.key == "inferline.frame.index")
              for e in events]  # fmt: skip
    assert frames == indices


async def test_a_sampled_requests_latency_carries_its_trace_as_an_exemplar(
    traced_stack: tuple[StackConfig, Receiver],
) -> None:
    # Each service's /metrics speaks OpenMetrics to Prometheus, whose exemplar storage keeps
    # the sampled trace beside the bucket a request's duration fell in.
    config, _ = traced_stack
    since = time.time()
    sampled = sampled_trace()
    await classify(config, f"00-{sampled}-{secrets.token_hex(8)}-01")
    query = urllib.parse.urlencode({
        "query": "inferline_middleman_grpc_request_duration_seconds_bucket",
        "start": since - 1, "end": since + 600,
    })  # fmt: skip

    def exemplars() -> list[dict[str, Any]]:
        url = f"{config.prometheus_url}/api/v1/query_exemplars?{query}"
        with urllib.request.urlopen(url, timeout=5) as answer:
            found: list[dict[str, Any]] = json.load(answer)["data"]
        return [e for series in found for e in series["exemplars"]]

    await wait_for_state(
        lambda: any(e["labels"].get("trace_id") == sampled for e in exemplars()),
        WAIT_S,
        "the sampled request's exemplar in Prometheus",
    )
