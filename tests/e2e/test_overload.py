"""Overload without collapse, on the local stack (every hop through the real Envoy).

Triton serves a SIMULATED GPU slow enough that the model, not this machine's two cores, is the
bottleneck (a batch of 8 takes 180 ms: about 44 images/s); its answers are not a
classification. The test measures the capacity itself (64 callers), then offers ten times it for
10 s twice — 1024 closed-loop callers, then Poisson arrivals at ten times the capacity — each
request with a 5 s deadline. Every figure is printed (``-s``), in the table that
``make bench-overload`` prints. Asserted here is the behaviour: what is not served is refused
(RESOURCE_EXHAUSTED, or DEADLINE_EXCEEDED saying why), nothing admitted fails, refused work
never reaches Triton, memory stays bounded, the pipeline serves again once the crowd leaves.
How fast and how much (goodput, refusal latency, recovery time: wall-clock goals on a shared
machine) are ``make bench-overload``'s, which marks each goal met or missed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from inferline import capacity
from inferline_stack.config import StackConfig
from inferline_testing import media
from inferline_testing.overload.report import short_deadline_line, table
from inferline_testing.overload.scenario import SIMULATED, measure
from inferline_testing.overload.short_deadlines import SHORT_DEADLINE_S, short_deadlines
from inferline_testing.requests import bytes_request
from inferline_testing.stacks import own_stack

pytestmark = pytest.mark.e2e

MiB = 1024 * 1024
# Seconds per phase, after the crowd's 5 s warm-up: five of Envoy's 2 s shedding windows, and
# long enough for an unbounded queue to pass RSS_CAPS_MIB (the closed crowd's 1024 requests in
# flight at once, the open crowd's arrivals at 440/s); make bench-overload runs a minute each
# for its figures.
DURATION_S = 10.0
# Seconds the paced caller goes on after each crowd: past the crowd's last deadline (5 s), so its
# last request meets the pipeline recovered.
RECOVERY_S = 6.0
# Resident memory each process may reach in the default configuration under the crowds: about
# 1.3 to 2.5 times the peaks measured here (the batcher, which holds tensors, reached 600 MiB),
# so an unbounded queue would pass them within seconds while allocator noise does not.
RSS_CAPS_MIB = {
    "middleman": 640,
    "batcher": 768,
    "preprocess": 512,
    "triton": 640,
    "envoy": 384,
    "eds": 256,
    "prometheus": 256,
}


@pytest.fixture(scope="module")
def overload_stack(
    model_repository: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StackConfig]:
    run_dir = tmp_path_factory.mktemp("overload")
    repository = str(model_repository)
    with own_stack(run_dir, "overload", model_repository=repository, **SIMULATED) as config:
        yield config


def images() -> list[bytes]:
    return [media.encode(media.photo_at(name, 640, 480)) for name in ("chelsea", "coffee")]


async def test_under_ten_times_capacity_what_is_not_served_is_refused_in_bounded_memory(
    overload_stack: StackConfig,
) -> None:
    report = await measure(overload_stack, images(), DURATION_S, RECOVERY_S)
    print(f"\n{table(report.to_dict())}")
    for crowd, spike in report.crowds:
        summary = crowd.summary
        assert summary.images, f"{crowd.name}: nothing served under the crowd (a collapse)"
        # What was not served was refused: no admitted request ran past its deadline.
        assert set(summary.errors_by_code) <= {"RESOURCE_EXHAUSTED"}, summary.errors_by_code
        assert summary.errors_by_code, f"{crowd.name}: ten times capacity, and nothing refused?"
        # A caller arriving during the crowd was refused too, not queued behind it ...
        assert spike.refusal_p99_ms() is not None, f"{crowd.name}: no paced call was refused"
        # ... and is served again once the crowd has left.
        after = [sample for sample in spike.paced if sample.sent >= spike.ended]
        assert after and after[-1].error is None, f"{crowd.name}: after the crowd, {after[-1:]}"
        for process, peak in crowd.peak_rss.items():
            cap = RSS_CAPS_MIB[process.rsplit("-", 1)[0]]
            assert peak <= cap * MiB, f"{crowd.name}: {process} reached {peak / MiB:.0f} MiB"


async def test_a_deadline_the_pipeline_cannot_meet_is_refused_and_never_reaches_triton(
    overload_stack: StackConfig,
) -> None:
    result = await short_deadlines(overload_stack, images())
    print(f"\n{short_deadline_line(result.to_dict())}")
    # Every 50 ms request was answered DEADLINE_EXCEEDED: by middleman, which said why, or, on
    # a machine busy enough to spend the 50 ms before middleman saw it, by its deadline passing
    # on the way (never sooner: nothing else refused it).
    assert all(o.error == "DEADLINE_EXCEEDED" for o in result.outcomes), result.outcomes
    said_why = ["less than the fastest answer" in o.message for o in result.outcomes]
    assert any(said_why), result.outcomes
    for outcome, why in zip(result.outcomes, said_why, strict=True):
        assert why or outcome.latency_s >= SHORT_DEADLINE_S, outcome
    # Triton inferred exactly the background's images: none of the refused requests' work.
    assert result.background.errors == 0, result.background.errors_by_code
    assert result.inferred == result.background.images


def request_of_size(size: int, images: int = 5) -> service_pb2.ModelInferRequest:
    """A classifier request of exactly ``size`` serialized bytes: ``images`` real JPEGs, padded
    (the last one takes up the difference)."""
    photo = media.encode(media.photo_at("chelsea", 320, 240))
    share = size // images - 1024
    first = [media.padded_jpeg(photo, share)] * (images - 1)
    last = share
    for _ in range(8):  # a length prefix may grow by a byte as the payload does
        items = [*first, media.padded_jpeg(photo, last)]
        request = bytes_request(items, request_id="edge")
        if request.ByteSize() == size:
            return request
        last += size - request.ByteSize()
    raise AssertionError(f"no request of exactly {size} bytes")


@pytest.mark.parametrize("over", [0, 1], ids=["at the limit", "one byte over"])
async def test_the_public_message_limit_holds_end_to_end(
    overload_stack: StackConfig, over: int
) -> None:
    request = request_of_size(capacity.MAX_MESSAGE_BYTES + over)
    target = f"127.0.0.1:{overload_stack.public_port}"
    options = [("grpc.max_send_message_length", 2 * capacity.MAX_MESSAGE_BYTES)]
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        if not over:  # through Envoy, middleman, preprocess, the batcher and Triton
            response = await stub.ModelInfer(request, timeout=60.0)
            assert list(response.outputs[0].shape) == [5, 1000]
            return
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.ModelInfer(request, timeout=60.0)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert raised.value.details() == (
        f"the request is {capacity.MAX_MESSAGE_BYTES + 1} bytes, over the limit of "
        f"{capacity.MAX_MESSAGE_BYTES} (INFERLINE_MIDDLEMAN_MAX_MESSAGE_BYTES): send fewer or "
        "smaller images per request"
    )
