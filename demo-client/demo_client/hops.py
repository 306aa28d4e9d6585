"""The pipeline's hops as an answer's ``Server-Timing`` names them, how they nest, and each
one's own time: the exclusive segments a stacked bar needs (pure: no I/O).

The hops' times nest (docs/tracing.md): ``envoy`` (the front door to the first byte of
middleman's answer) contains ``middleman`` (its receipt to its answer), which contains ``queue``
(the wait in the batcher's queue) and ``batch`` (the upstream call carrying the request's batch,
to the GPU pod and back), which contains ``decode`` (the batch's images) and ``infer`` (the
pod's call to Triton). Stacked as they are, the outer hops would count the inner ones again, so
each hop's segment is its time less that of the hops directly inside it that the answer has.
"""

from __future__ import annotations

from collections.abc import Mapping

HOPS = ("envoy", "middleman", "queue", "batch", "decode", "infer")  # in the pipeline's order

# The hops directly inside each one.
INSIDE: dict[str, tuple[str, ...]] = {
    "envoy": ("middleman",),
    "middleman": ("queue", "batch"),
    "batch": ("decode", "infer"),
}

# Each hop's own segment, named for what it is once the hops inside are taken out.
SEGMENT_OF = {
    "envoy": "envoy",
    "middleman": "middleman",
    "queue": "queue",
    "batch": "pod & network",
    "decode": "decode",
    "infer": "infer",
}
SEGMENTS = tuple(SEGMENT_OF[hop] for hop in HOPS)
# What the client measured beyond the outermost hop the answer timed.
OUTSIDE = "client & network"

# What each segment is, in words (the page's legend says it on hover).
ABOUT = {
    "envoy": "Envoy's own time: the front door, TLS and routing, less middleman's",
    "middleman": "middleman's own time: reading the request, answering, less the batcher's",
    "queue": "waiting in the batcher's queue for a batch to fill",
    "pod & network": "the batch's call to the GPU pod and back, less decoding and inference: "
    "the network and the pod's own handling",
    "decode": "decoding the batch's images in the pod",
    "infer": "the pod's call to Triton: inference",
    OUTSIDE: "the client's total less the pipeline's hops: the client, the network to the "
    "front door and the answer's way back",
}


def _present_inside(hop: str, timing: Mapping[str, float]) -> list[str]:
    """The hops nearest inside ``hop`` that ``timing`` has: a hop the answer lacks stands for
    the hops inside it (a placement without a batcher still has the pod's hops inside
    middleman)."""
    found: list[str] = []
    for inner in INSIDE.get(hop, ()):
        found.extend([inner] if inner in timing else _present_inside(inner, timing))
    return found


def exclusive_segments(timing: Mapping[str, float]) -> dict[str, float]:
    """Each hop's own milliseconds, by segment name, in the pipeline's order: the hop's time
    less that of the hops inside it that ``timing`` has, at least 0 (Envoy's time is whole
    milliseconds, so it can be below middleman's). Hops ``timing`` lacks have no segment; names
    that are not the pipeline's hops are left out."""
    segments: dict[str, float] = {}
    for hop in HOPS:
        if hop not in timing:
            continue
        inner = sum(timing[h] for h in _present_inside(hop, timing))
        segments[SEGMENT_OF[hop]] = max(0.0, timing[hop] - inner)
    return segments


def outside_ms(segments: Mapping[str, float], total_ms: float) -> float:
    """What the client measured beyond the hops' segments (at least 0)."""
    return max(0.0, total_ms - sum(segments.values()))
