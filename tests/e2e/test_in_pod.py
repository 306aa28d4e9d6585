"""The in-pod placement (the stack's default): images cross Envoy encoded and are decoded beside
Triton, handed over in shared memory. No decoded tensor crosses Envoy: its per-cluster byte
counters grow by about the photos, not by the tensors, while the pod's preprocess counts every
tensor byte it put in shared memory."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from inferline_envoy import admin as envoy_admin
from inferline_stack.config import CLUSTERS, IN_POD, PREPROCESS, StackConfig
from inferline_testing import media

from .test_classify import classify

pytestmark = pytest.mark.e2e

TENSOR_BYTES = 3 * 224 * 224  # one decoded EfficientNet-Lite0 input, uint8
SHM_BYTES = "inferline_preprocess_shared_memory_bytes_total"


def pod_counter(config: StackConfig, name: str) -> float:
    """A counter of triton-0's preprocess (the pod's own /metrics)."""
    url = f"http://127.0.0.1:{config.pod_metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not in {url}")


async def cluster_bytes(config: StackConfig) -> dict[str, int]:
    """Every cluster's upstream bytes, received and sent, as Envoy counts them."""
    found = await envoy_admin.stats(
        config.admin_url, r"^cluster\..*\.upstream_cx_[rt]x_bytes_total$"
    )
    return {
        c: sum(int(v) for k, v in found.items() if k.startswith(f"cluster.{c}.")) for c in CLUSTERS
    }


async def test_no_decoded_tensor_crosses_envoy(stack: StackConfig) -> None:
    assert stack.placement == IN_POD and PREPROCESS not in stack.services  # no preprocess hop
    photo = media.encode(media.photo("chelsea"))  # 451x300: its tensor is 2.6x its JPEG
    count = 20
    before, shm_before = await cluster_bytes(stack), pod_counter(stack, SHM_BYTES)
    for _ in range(count // 4):
        rows = classify(f"127.0.0.1:{stack.public_port}", [photo] * 4)
        assert rows.shape == (4, 3)
    after, shm_after = await cluster_bytes(stack), pod_counter(stack, SHM_BYTES)
    moved = {c: (after[c] - before[c]) / count for c in CLUSTERS}
    print(f"photo {len(photo)} B, tensor {TENSOR_BYTES} B; bytes per image by cluster: {moved}")
    assert shm_after - shm_before >= count * TENSOR_BYTES  # every tensor went by shared memory
    for cluster, per_image in moved.items():  # the photo and a few KiB of answer, no tensor
        assert per_image < len(photo) + 16 * 1024 < TENSOR_BYTES, (cluster, per_image)
    assert moved["triton"] > len(photo)  # the GPU pods got the photos themselves
