"""The deployed limits agree (inferline.capacity): with the autoscalers at their most middleman
replicas, the batchers and preprocess replicas hold all that those middlemen admit, and no
manifest overrides a bound so that an inner hop would refuse first.

A preprocess pool (the remote placement) is checked as the batchers are; in the in-pod
placement each GPU pod's preprocess gets the batches of the batchers (each keeps at most
MAX_INFLIGHT in flight), not the middlemen's requests, so the batchers are the bound there."""

from __future__ import annotations

from typing import Any

import pytest

from inferline import capacity
from k8s.tests.manifests import OVERLAYS, containers, find, render

BOUNDS = (
    "INFERLINE_MIDDLEMAN_MAX_INFLIGHT",
    "INFERLINE_BATCHER_MAX_QUEUE",
    "INFERLINE_PREPROCESS_MAX_INFLIGHT",
    "INFERLINE_MIDDLEMAN_MAX_MESSAGE_BYTES",
    "INFERLINE_BATCHER_MAX_MESSAGE_BYTES",
    "INFERLINE_PREPROCESS_MAX_MESSAGE_BYTES",
    "INFERLINE_MIDDLEMAN_MAX_IMAGE_BYTES",
    "INFERLINE_PREPROCESS_MAX_IMAGE_BYTES",
)


def most_replicas(objects: list[dict[str, Any]], name: str) -> int:
    hpas = [
        o
        for o in objects
        if o["kind"] == "HorizontalPodAutoscaler" and o["spec"]["scaleTargetRef"]["name"] == name
    ]
    if hpas:
        return int(hpas[0]["spec"]["maxReplicas"])
    return int(find(objects, "Deployment", name)["spec"].get("replicas", 1))


def fewest_replicas(objects: list[dict[str, Any]], name: str) -> int:
    hpas = [
        o
        for o in objects
        if o["kind"] == "HorizontalPodAutoscaler" and o["spec"]["scaleTargetRef"]["name"] == name
    ]
    if hpas:
        return int(hpas[0]["spec"].get("minReplicas", 1))
    return int(find(objects, "Deployment", name)["spec"].get("replicas", 1))


TARGETS = [*(f"overlays/{o}" for o in OVERLAYS), "everything/remote"]


@pytest.mark.parametrize("target", TARGETS)
def test_inner_replicas_hold_what_the_most_middlemen_admit(target: str) -> None:
    objects = render(target)
    middlemen = most_replicas(objects, "middleman")
    pool = [
        o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "preprocess"
    ]
    assert bool(pool) is (target == "everything/remote"), "a preprocess pool in remote only"
    for inner in ("batcher", "preprocess") if pool else ("batcher",):
        replicas = fewest_replicas(objects, inner)
        assert middlemen <= capacity.FAN_IN * replicas, (
            f"{target}: up to {middlemen} middlemen admit {capacity.ADMITTED_REQUESTS} requests "
            f"each, more than {replicas} {inner} replicas hold ({capacity.FAN_IN} middlemen each)"
        )


@pytest.mark.parametrize("target", TARGETS)
def test_no_manifest_overrides_a_bound(target: str) -> None:
    # The bounds come from inferline.capacity's defaults, so they agree by construction; a
    # manifest that sets one must be checked against the others first (then change this test).
    found = list(containers(render(target)))
    assert {"middleman", "batcher", "preprocess"} <= {c.name for c in found}, target
    for container in found:
        overridden = sorted(set(container.env()) & set(BOUNDS))
        assert not overridden, f"{container.where} sets {overridden}"


def test_envoys_retries_are_the_ones_a_proxyless_hop_makes() -> None:
    """Envoy's retries and retry budget (the manifests render its defaults) and
    inferline.retry's, which a hop dialled proxyless makes, are one policy."""
    from inferline_envoy.params import EnvoyParams

    params = EnvoyParams()
    assert params.retry_budget_percent == capacity.RETRY_BUDGET_PERCENT
    assert params.min_retry_concurrency == capacity.MIN_RETRY_CONCURRENCY
    assert params.num_retries == capacity.HOP_RETRIES
    assert params.retry_back_off_s == capacity.RETRY_BACK_OFF_S
    assert params.retry_back_off_max_s == capacity.RETRY_BACK_OFF_MAX_S
