"""Part 1's scenarios: the placements, both dialings, tracing, per-hop timing, the real model and
REST, each a stack of its own under the demo client."""

from __future__ import annotations

from dataclasses import dataclass

from inferline import tracing
from inferline_stack.config import AUTO, IN_POD, IN_PROCESS, REMOTE


@dataclass(frozen=True)
class Scenario:
    key: str  # its name in pipeline.json
    title: str
    model: str  # simulated_gpu or efficientnet_lite0
    concurrency: int
    batch: int  # images per request
    placement: str = IN_POD  # INFERLINE_STACK_PLACEMENT
    protocol: str = "grpc"  # the demo client's: KServe v2 over gRPC or HTTP/REST
    proxyless: str = AUTO  # INFERLINE_STACK_PROXYLESS: "" dials every inner hop through Envoy
    # Tracing: off (None), or on with this share of requests sampled, every process exporting
    # over OTLP to a receiver in this benchmark's process (its CPU is not the pipeline's)
    sampled: float | None = None
    timed: bool = True  # per-hop timing in every answer (INFERLINE_SERVER_TIMING)


# How the inner hops are dialled: the default (middleman to the batchers proxyless), and every
# hop through Envoy (key suffix ``_envoy``), side by side in every placement.
DIALS = ((AUTO, "", "proxyless to the batchers"), ("", "_envoy", "every hop through Envoy"))


def _placements() -> tuple[Scenario, ...]:
    """The simulated GPU at 1 and 8 images per request in each placement, both dialings."""
    return tuple(
        Scenario(
            f"{key}_{batch}{suffix}",
            f"{placement}, simulated GPU, conc {concurrency}, {batch} image(s)/request, {dial}",
            "simulated_gpu",
            concurrency,
            batch,
            placement=placement,
            proxyless=proxyless,
        )
        for batch, concurrency in ((1, 32), (8, 16))
        for placement, key in ((IN_POD, "simulated"), (REMOTE, "remote"), (IN_PROCESS, "inprocess"))
        for proxyless, suffix, dial in DIALS
    )


def _traced() -> tuple[Scenario, ...]:
    """What tracing costs: the default arrangement at 1 image per request with tracing on, at
    the default sampling ratio and with every request sampled (beside simulated_1: off)."""
    return tuple(
        Scenario(
            f"simulated_1_traced{suffix}",
            f"in-pod, simulated GPU, conc 32, 1 image(s)/request, traced at {ratio:g}",
            "simulated_gpu",
            32,
            1,
            sampled=ratio,
        )
        for ratio, suffix in ((tracing.DEFAULT_RATIO, ""), (1.0, "_all"))
    )


SCENARIOS = (
    *_placements(),
    *_traced(),
    # What per-hop timing in every answer costs: the default arrangement without it.
    Scenario(
        "simulated_1_untimed",
        "in-pod, simulated GPU, conc 32, 1 image(s)/request, no per-hop timing",
        "simulated_gpu",
        32,
        1,
        timed=False,
    ),
    Scenario("real_1", "in-pod, real model, conc 16, 1 image/request", "efficientnet_lite0", 16, 1),
    # The public endpoint's other transport: KServe v2 REST with binary tensors (tritonclient.http).
    Scenario(
        "simulated_1_http",
        "in-pod, simulated GPU, conc 32, 1 image/request, over HTTP/REST",
        "simulated_gpu",
        32,
        1,
        protocol="http",
    ),
)

# The default placement's scenarios: what a GPU owner sizes the CPUs by.
DEFAULTS = ("simulated_1", "simulated_8", "real_1")
