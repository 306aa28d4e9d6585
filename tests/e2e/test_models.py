"""Two real models side by side through the whole stack: EfficientNet-Lite0 (``classifier``,
224 px) and EfficientNet-Lite2 (``efficientnet_lite2``, 260 px), served by one Triton, batched
by one batcher, decoded by one preprocess to each model's own geometry."""

from __future__ import annotations

import asyncio
import urllib.request
from collections import Counter

import numpy as np
import pytest
import tritonclient.grpc.aio as triton
from prometheus_client.parser import text_string_to_metric_families

from inferline_stack.config import StackConfig
from inferline_testing import media
from inferline_testing.waits import wait_for_state

pytestmark = pytest.mark.e2e

LITE0, LITE2 = "efficientnet_lite0", "efficientnet_lite2"
COFFEE_CLASSES = (504, 967, 968)  # coffee mug, espresso, cup
WORKERS, REQUESTS = 6, 8  # per model: 48 requests of 2 images each, 12 in flight at once


def counters(url: str, sample_name: str, label: str) -> Counter[str]:
    """Samples named ``sample_name`` summed by ``label``, from a /metrics page (the parser
    names a counter's samples ``…_total``)."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    totals: Counter[str] = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == sample_name:
                totals[sample.labels.get(label, "")] += int(sample.value)
    return totals


def triton_inferences(stack: StackConfig) -> Counter[str]:
    """Images Triton inferred so far, by model (``nv_inference_count``)."""
    port = stack.replica_ports("triton", 0)[2]
    return counters(f"http://127.0.0.1:{port}/metrics", "nv_inference_count_total", "model")


def batches(stack: StackConfig) -> Counter[str]:
    """Batches the batcher sent upstream so far, by model."""
    url = f"http://127.0.0.1:{stack.batcher_metrics_port}/metrics"
    return counters(url, "inferline_batcher_batch_size_items_count", "model")


async def worker(url: str, model: str, images: list[bytes]) -> list[list[int]]:
    """``REQUESTS`` calls of ``images`` to ``model``; each answer's top-3 class indices."""
    tops: list[list[int]] = []
    async with triton.InferenceServerClient(url) as client:
        for _ in range(REQUESTS):
            tensor = triton.InferInput("IMAGE", [len(images)], "BYTES")
            tensor.set_data_from_numpy(np.array(images, dtype=np.object_))
            result = await client.infer(model, [tensor], client_timeout=60)
            assert result.get_response().model_name == model
            probabilities = result.as_numpy("PROBABILITIES")
            assert probabilities is not None and probabilities.shape == (len(images), 1000)
            tops.extend(np.argsort(-row)[:3].tolist() for row in probabilities)
    return tops


async def test_both_models_classify_at_once_under_load_in_batches_of_one_model(
    stack: StackConfig,
) -> None:
    url = f"127.0.0.1:{stack.public_port}"
    images = [media.cat_jpeg(), media.encode(media.photo("coffee"))]
    inferred, batched = triton_inferences(stack), batches(stack)

    runs = [(model, worker(url, model, images)) for model in ("classifier", LITE2) * WORKERS]
    answers = await asyncio.gather(*(run for _, run in runs))

    for (model, _), tops in zip(runs, answers, strict=True):
        cats, coffees = tops[0::2], tops[1::2]
        assert all(set(top) & set(media.CAT_CLASSES) for top in cats), (model, cats)
        assert all(set(top) & set(COFFEE_CLASSES) for top in coffees), (model, coffees)
    sent = WORKERS * REQUESTS * len(images)

    def counted() -> bool:  # Triton counts a request once it has released it: after answering
        now = triton_inferences(stack)
        return all(now[m] - inferred[m] >= sent for m in (LITE0, LITE2))

    await wait_for_state(counted, 30, f"Triton's count of {sent} inferences of each model")
    now = triton_inferences(stack)
    # Every image reached the model it was sent to, none the other one (a mixed batch would
    # also fail outright: 224 and 260 px tensors do not stack).
    assert now[LITE2] - inferred[LITE2] == sent
    assert now[LITE0] - inferred[LITE0] == sent
    more = batches(stack)
    for model in (LITE0, LITE2):
        assert 0 < more[model] - batched[model] < WORKERS * REQUESTS, "the batcher never batched"


async def test_every_model_is_listed_and_described_by_name(public_url: str) -> None:
    async with triton.InferenceServerClient(public_url) as client:
        index = await client.get_model_repository_index()
        assert [m.name for m in index.models] == ["classifier", LITE0, LITE2, "classifier_video"]
        assert await client.is_model_ready(LITE2)
        metadata = await client.get_model_metadata(LITE2)
        config = (await client.get_model_config(LITE2)).config
    assert [(t.name, list(t.shape)) for t in metadata.outputs] == [("PROBABILITIES", [-1, 1000])]
    assert config.name == LITE2 and config.max_batch_size > 0


async def test_lite2_classifies_every_unusual_image(public_url: str) -> None:
    names = sorted(media.UNUSUAL)
    async with triton.InferenceServerClient(public_url) as client:
        tensor = triton.InferInput("IMAGE", [len(names)], "BYTES")
        tensor.set_data_from_numpy(np.array([media.UNUSUAL[n]() for n in names], np.object_))
        result = await client.infer(LITE2, [tensor], client_timeout=60)
    probabilities = result.as_numpy("PROBABILITIES")
    assert probabilities is not None
    for name, row in zip(names, probabilities, strict=True):
        assert set(np.argsort(-row)[:3].tolist()) & set(media.CAT_CLASSES), name
