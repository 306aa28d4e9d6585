"""The local stack's own trace view: ``INFERLINE_STACK_TRACING=true`` with no OTLP endpoint in
the environment runs MLflow (``make mlflow`` installs it), every process of the stack (Envoy and
Triton included) sends it its spans, and its page shows one request's trace as a tree.

The real MLflow, read through its REST API (``/api/3.0/mlflow/traces/get``) and its page in
Debian's chromium (playwright). Skipped where MLflow, chromium or playwright is missing, failed
instead in CI (``INFERLINE_REQUIRE_TOOLS=1``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from tritonclient.utils import InferenceServerException

from inferline_stack import traceview
from inferline_stack.config import StackConfig
from inferline_testing import tools
from inferline_testing.browser import launch_args, screenshot_path
from inferline_testing.stacks import own_stack
from inferline_testing.traced import classify, traceparent, unsampled
from inferline_testing.waits import wait_for_state

pytestmark = pytest.mark.e2e

WAIT_S = 60.0
INFER = "inference.GRPCInferenceService/ModelInfer"
ERROR = "STATUS_CODE_ERROR"
MLFLOW = Path(".venv-mlflow/bin/mlflow")
# One request's spans, by name: Envoy's hops (the front door, the GPU pool; the batcher is
# dialled proxyless), middleman's, the batcher's and the pod's calls, the batch, the pod's
# decode and infer, Triton's request and model.
WANTED = {
    "middleman", "triton", INFER, "batch simulated_gpu", "decode", "infer", "InferRequest",
    "simulated_gpu",
}  # fmt: skip


@pytest.fixture(scope="module")
def traced_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackConfig]:
    mlflow = tools.tool("mlflow", traceview.INSTALL_HINT, at=MLFLOW)
    environ = {
        "OTEL_BSP_SCHEDULE_DELAY": "50",  # ms: spans leave at once, for the test's sake
        # A batch waits up to 100 ms for more (2 by default): two requests sent at once share it.
        "INFERLINE_BATCHER_MAX_QUEUE_DELAY_MS": "100",
    }
    with mock.patch.dict(os.environ, environ):
        for name in [n for n in os.environ if n.startswith("OTEL_EXPORTER_OTLP")]:
            del os.environ[name]  # no endpoint of the user's: the stack's own view
        with own_stack(
            tmp_path_factory.mktemp("trace-view"),
            "trace view",
            model="simulated_gpu",
            tracing=True,
            mlflow=mlflow,
            prometheus=False,  # nothing here reads it
        ) as config:
            yield config


def spans_of(config: StackConfig, trace_id: str) -> list[dict[str, Any]]:
    """The spans MLflow holds of ``trace_id`` (none yet: an empty list)."""
    url = f"{config.trace_view_url}/api/3.0/mlflow/traces/get?trace_id=tr-{trace_id}"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            spans: list[dict[str, Any]] = json.load(answer)["trace"]["spans"]
            return spans
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise


def hex_id(value: str) -> str:
    """An id as MLflow's JSON writes it (base64 of its bytes), in hex."""
    return base64.b64decode(value).hex() if value else ""


async def test_the_stacks_trace_view_holds_one_request_from_every_process(
    traced_stack: StackConfig,
) -> None:
    config = traced_stack
    assert (Path(config.run_dir) / traceview.VIEW_FILE).read_text().strip() == (
        traceview.trace_url_template(config)
    )  # what `make demo-web` links with
    trace_id, caller = secrets.token_hex(16), secrets.token_hex(8)
    await classify(config, traceparent(trace_id, caller, sampled=True))

    async def traffic() -> None:  # Triton exports a request's spans when its next one comes
        while True:
            await classify(config, unsampled())
            await asyncio.sleep(0.2)

    seen: set[str] = set()  # the span names MLflow holds so far: a timeout says which lack

    def complete() -> bool:
        seen.update(s["name"] for s in spans_of(config, trace_id))
        return seen >= WANTED

    follow = asyncio.create_task(traffic())
    try:
        await wait_for_state(
            complete,
            WAIT_S,
            "the sampled request's spans in MLflow, from Envoy, the services and Triton",
        )
    except TimeoutError as exc:
        raise TimeoutError(f"{exc}; missing {sorted(WANTED - seen)}") from None
    finally:
        follow.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await follow
    spans = spans_of(config, trace_id)
    assert {hex_id(s["trace_id"]) for s in spans} == {trace_id}
    ids = {hex_id(s["span_id"]) for s in spans}
    roots = [s for s in spans if hex_id(s.get("parent_span_id", "")) not in ids]
    assert [(r["name"], hex_id(r["parent_span_id"])) for r in roots] == [("middleman", caller)]
    assert sum(1 for s in spans if s["name"] == INFER) == 3  # middleman, batcher, the pod

    await shows_the_trace(config, trace_id, screenshot_path("trace-view.png"))


async def test_two_requests_batched_together_are_one_batch_span_in_the_view_linked_to_both(
    traced_stack: StackConfig,
) -> None:
    config = traced_stack
    callers = [(secrets.token_hex(16), secrets.token_hex(8)) for _ in range(2)]
    await asyncio.gather(*(classify(config, traceparent(t, c, sampled=True)) for t, c in callers))

    def batches() -> list[dict[str, Any]]:
        return [
            s for t, _ in callers for s in spans_of(config, t) if s["name"] == "batch simulated_gpu"
        ]

    [batch] = await wait_for_state(batches, WAIT_S, "the batch span of the two requests")
    linked = [(hex_id(link["trace_id"]), hex_id(link["span_id"])) for link in batch["links"]]
    assert sorted(t for t, _ in linked) == sorted(t for t, _ in callers)
    for trace_id, span_id in linked:  # each request's own span at the batcher
        [span] = [s for s in spans_of(config, trace_id) if hex_id(s["span_id"]) == span_id]
        assert span["name"] == INFER


async def test_an_errors_spans_carry_its_status_in_the_view(traced_stack: StackConfig) -> None:
    config = traced_stack
    trace_id = secrets.token_hex(16)
    header = traceparent(trace_id, secrets.token_hex(8), sampled=True)
    with pytest.raises(InferenceServerException, match="INVALID_ARGUMENT"):
        await classify(config, header, image=b"not an image")

    def every_call() -> list[dict[str, Any]]:  # middleman's, the batcher's, the pod's
        spans = spans_of(config, trace_id)
        return spans if sum(s["name"] == INFER for s in spans) == 3 else []

    spans = await wait_for_state(every_call, WAIT_S, "the refused request's spans")
    errors = [(s["name"], s["status"]) for s in spans if s["status"].get("code", "") == ERROR]
    # middleman's, which refused it; its batch went on (a bad image fails none but itself)
    assert errors == [(INFER, {"code": ERROR, "message": "INVALID_ARGUMENT"})]


async def shows_the_trace(config: StackConfig, trace_id: str, screenshot: Path) -> None:
    """The trace's page in MLflow's UI lists its spans (a screenshot is kept)."""
    from playwright.async_api import async_playwright

    url = traceview.trace_url_template(config).format(trace_id=trace_id)
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(**launch_args())
        try:
            page = await chromium.new_page(viewport={"width": 1400, "height": 900})
            await page.goto(url)
            for name in ("batch simulated_gpu", "InferRequest", "decode"):
                await page.get_by_text(name, exact=True).first.wait_for(timeout=WAIT_S * 1000)
            await page.screenshot(path=str(screenshot))
        finally:
            await chromium.close()
