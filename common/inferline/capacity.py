"""The pipeline's limits in one place: message sizes, admission, queues, Envoy's circuit breakers.

Every service's default and the local stack's Envoy take their bounds from here, and
``stack/tests/test_stack_capacity.py`` and ``k8s/tests/test_capacity.py`` check that they
agree, so no inner hop refuses what an outer hop admitted:

* **messages**: a client's request may be up to :data:`MAX_MESSAGE_BYTES` (middleman's public
  limit). Inner hops carry the same bytes in their own framing (another model name, other
  outputs), so preprocess, the batcher and every channel accept :data:`INNER_MESSAGE_BYTES`.
* **admission**: a middleman serves at most :data:`ADMITTED_REQUESTS` requests, and
  :data:`ADMITTED_BYTES` of their encoded bytes, at once; beyond that, and whenever the
  measured throughput says a request cannot finish within its deadline, it refuses at once with
  RESOURCE_EXHAUSTED instead of queueing work it would finish too late.
* **queues**: the batcher's queue and preprocess's requests in flight hold what :data:`FAN_IN`
  middlemen may admit, so with at most that many middleman replicas per batcher or preprocess
  replica (the Kubernetes autoscaler's bounds are checked against it) they refuse only when
  something is misconfigured. Their byte bounds are memory guards of each process: a batcher
  holds tensors, not the encoded images middleman counted.
* **Envoy**: its circuit breakers sit above all of it. Envoy is never the first to refuse: its
  overflow is a bare 503 (UNAVAILABLE, which clients retry) with no reason a person can act on.
"""

from __future__ import annotations

MiB = 1024 * 1024

# A client's request, at most (middleman's public limit).
MAX_MESSAGE_BYTES = 64 * MiB
FRAMING_BYTES = 64 * 1024  # room for one hop's own fields around the same payload
# What inner hops (preprocess, the batcher, every channel) accept: the same bytes, their framing.
INNER_MESSAGE_BYTES = MAX_MESSAGE_BYTES + FRAMING_BYTES
# One encoded image. 200 MP phone JPEGs are 20-55 MB (Galaxy S23 Ultra 21-37 MB, Xiaomi 12T Pro
# ~55 MB), full-frame cameras' finest JPEGs 20-40 MB: 60 MiB takes them all, one to a request.
MAX_IMAGE_BYTES = 60 * MiB

# What one middleman serves at once, at most: requests, and their encoded bytes.
ADMITTED_REQUESTS = 256
ADMITTED_BYTES = 256 * MiB
# Below this many requests in flight middleman admits without consulting its throughput
# estimate: too little is in flight then for the estimate to mean anything.
ADMISSION_FLOOR_REQUESTS = 32
DEFAULT_DEADLINE_S = 30.0  # what a request without a deadline gets

FAN_IN = 5  # middleman replicas per batcher (and per preprocess) replica, at most
# The batcher's queue per model: what FAN_IN middlemen admit; its bytes, a memory guard.
BATCHER_QUEUE_REQUESTS = ADMITTED_REQUESTS * FAN_IN
BATCHER_QUEUE_BYTES = 512 * MiB
# preprocess's requests decoding at once: what FAN_IN middlemen admit; their bytes, a guard.
PREPROCESS_INFLIGHT_REQUESTS = ADMITTED_REQUESTS * FAN_IN
PREPROCESS_INFLIGHT_BYTES = 512 * MiB

# What a gRPC server lets one stream receive ahead of the service reading it: a video upload
# whose decoder waits (the GPU is busy) holds this much in the transport, and no more. gRPC's
# default window grows with the link's bandwidth-delay product instead: with Triton paused for
# 1.5 s under an upload, middleman's peak memory grew 62.8 MiB. A unary message larger than this
# costs a round trip per window; every inner hop's (an image, a tensor) is smaller.
STREAM_WINDOW_BYTES = 4 * MiB
ENVOY_MAX_REQUESTS = 4096  # per cluster: requests in flight and pending, each
# Retries in flight: at most this share of the requests in flight, and at least this many (a
# kill -9 resets every request on a replica at once): Envoy's retry budget on every hop, and
# inferline.retry's on a hop dialled proxyless.
RETRY_BUDGET_PERCENT = 20.0
MIN_RETRY_CONCURRENCY = 16
# Retries of one request at one hop, each after a fully jittered exponential back-off (the n-th
# waits up to (2^n - 1) x the base, at most the cap): Envoy's on every hop, inferline.retry's
# on a hop dialled proxyless. Right after a kill -9 the dead replica is picked again and again
# until its balancer has seen it go: Envoy's least-request picks it for having nothing in
# flight, until outlier detection's ejection (made on Envoy's main thread, then passed to its
# workers) arrives, 20-100 ms later on a busy machine. One retry lost 1 of ~150 requests there,
# and three (back-offs summing to at most 110 ms) 1 of 151 in a loaded CI run; five sum to at
# most 310 ms (half the time over 150), and the retry budget, not this, bounds the attempts.
HOP_RETRIES = 5
RETRY_BACK_OFF_S = 0.01
RETRY_BACK_OFF_MAX_S = 0.1
