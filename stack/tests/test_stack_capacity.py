"""The limits agree across hops (inferline.capacity): no inner hop refuses what an outer hop
admitted, and Envoy is never the first to refuse. Checked on the defaults of every service and on
what the local stack starts them with."""

from __future__ import annotations

from typing import Any

from batcher.config import Config as BatcherConfig
from inferline import capacity
from inferline.config import load
from inferline_envoy.params import EnvoyParams
from inferline_envoy.render import render
from inferline_stack import envoy as stack_envoy
from inferline_stack import services
from inferline_stack.config import BATCHER, MAX_REPLICAS, MIDDLEMAN, PREPROCESS, StackConfig
from middleman.config import Config as MiddlemanConfig
from preprocess.config import Config as PreprocessConfig


def started_with(service: str, cls: type[Any], prefix: str) -> Any:
    """The configuration a replica of the local stack reads from the environment it is given."""
    return load(cls, prefix, [], services.replica(StackConfig(), service, 0).env)


def test_inner_hops_accept_what_the_public_limit_lets_in_plus_their_framing() -> None:
    middleman = MiddlemanConfig()
    assert middleman.max_message_bytes == capacity.MAX_MESSAGE_BYTES
    inner = middleman.max_message_bytes + capacity.FRAMING_BYTES
    assert PreprocessConfig().max_message_bytes >= inner
    assert BatcherConfig().max_message_bytes >= inner
    assert EnvoyParams().retry_buffer_bytes >= inner


def test_an_image_middleman_admits_fits_a_message_and_preprocess_takes_it() -> None:
    middleman = MiddlemanConfig()
    assert middleman.max_image_bytes == capacity.MAX_IMAGE_BYTES < middleman.max_message_bytes
    assert PreprocessConfig().max_image_bytes >= middleman.max_image_bytes


def test_the_stacks_batcher_and_preprocess_hold_what_every_middleman_admits() -> None:
    middleman = started_with(MIDDLEMAN, MiddlemanConfig, "INFERLINE_MIDDLEMAN")
    admitted = middleman.max_inflight * MAX_REPLICAS  # `make scale` may start that many
    assert started_with(BATCHER, BatcherConfig, "INFERLINE_BATCHER").max_queue >= admitted
    assert started_with(PREPROCESS, PreprocessConfig, "INFERLINE_PREPROCESS").max_inflight >= (
        admitted
    )


def test_the_defaults_hold_what_fan_in_middlemen_admit() -> None:
    admitted = MiddlemanConfig().max_inflight * capacity.FAN_IN
    assert BatcherConfig().max_queue >= admitted
    assert PreprocessConfig().max_inflight >= admitted


def test_envoy_is_never_the_first_to_refuse() -> None:
    rendered = render(stack_envoy.params(StackConfig()))
    clusters = rendered["static_resources"]["clusters"]
    admitted = MiddlemanConfig().max_inflight * MAX_REPLICAS
    eds_clusters = [c for c in clusters if c.get("type") == "EDS"]
    assert {c["name"] for c in eds_clusters} == {
        "middleman",
        "middleman-rest",
        "preprocess",
        "batcher",
        "triton",
    }
    for cluster in eds_clusters:
        (threshold,) = cluster["circuit_breakers"]["thresholds"]
        assert threshold["max_requests"] >= admitted, cluster["name"]
        assert threshold["max_pending_requests"] >= admitted, cluster["name"]
    defaults = EnvoyParams()  # what the Kubernetes bootstrap is rendered with
    assert defaults.max_requests == capacity.ENVOY_MAX_REQUESTS
    assert defaults.max_pending_requests == capacity.ENVOY_MAX_REQUESTS
    assert defaults.retry_buffer_bytes == capacity.INNER_MESSAGE_BYTES
