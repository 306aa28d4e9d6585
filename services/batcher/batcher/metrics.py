"""The batcher's Prometheus metrics, labelled by model: ``inferline_batcher_<thing>_<unit>``."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from inferline.metrics import LATENCY_BUCKETS

BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512)

BATCH_SIZE = Histogram(
    "inferline_batcher_batch_size_items",
    "Items (dim 0) per upstream call",
    ["model"],
    buckets=BATCH_BUCKETS,
)
BATCH_REQUESTS = Histogram(
    "inferline_batcher_batch_size_requests",
    "Requests merged into one upstream call",
    ["model"],
    buckets=BATCH_BUCKETS,
)
QUEUE_DELAY = Histogram(
    "inferline_batcher_queue_delay_seconds",
    "Time a request waited in the batcher before its batch went upstream",
    ["model"],
    buckets=LATENCY_BUCKETS,
)
UPSTREAM_DURATION = Histogram(
    "inferline_batcher_upstream_duration_seconds",
    "Time of one upstream call (a whole batch), retries included",
    ["model"],
    buckets=LATENCY_BUCKETS,
)
QUEUE_DEPTH = Gauge(
    "inferline_batcher_queue_depth_requests", "Requests waiting for a batch", ["model"]
)
IN_FLIGHT = Gauge(
    "inferline_batcher_inflight_batches", "Batches sent upstream, not yet answered", ["model"]
)
INFLIGHT_LIMIT = Gauge(
    "inferline_batcher_inflight_limit_batches",
    "Batches allowed in flight to the upstream (all models): MAX_INFLIGHT, or less while the "
    "adaptive limit sees batches queue there",
)
QUEUE_CAPACITY = Gauge(
    "inferline_batcher_queue_capacity_requests",
    "Requests a model's queue holds before refusing (the configured MAX_QUEUE)",
)
REJECTED = Counter(
    "inferline_batcher_rejected_requests_total",
    "Requests refused with RESOURCE_EXHAUSTED because the model's queue was full",
    ["model"],
)
EXPIRED = Counter(
    "inferline_batcher_expired_requests_total",
    "Requests whose deadline passed before their batch went upstream (never sent)",
    ["model"],
)
CANCELLED = Counter(
    "inferline_batcher_cancelled_requests_total",
    "Requests whose caller cancelled before the answer came",
    ["model"],
)
FAILED = Counter(
    "inferline_batcher_failed_requests_total",
    "Requests answered with an upstream error, by status code",
    ["model", "code"],
)


class ModelMetrics:
    """The metrics of one model, bound to its label once."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.batch_size = BATCH_SIZE.labels(model)
        self.batch_requests = BATCH_REQUESTS.labels(model)
        self.queue_delay = QUEUE_DELAY.labels(model)
        self.upstream_duration = UPSTREAM_DURATION.labels(model)
        self.queue_depth = QUEUE_DEPTH.labels(model)
        self.in_flight = IN_FLIGHT.labels(model)
        self.inflight_limit = INFLIGHT_LIMIT
        self.rejected = REJECTED.labels(model)
        self.expired = EXPIRED.labels(model)
        self.cancelled = CANCELLED.labels(model)

    def failed(self, code: str) -> None:
        FAILED.labels(self.model, code).inc()
