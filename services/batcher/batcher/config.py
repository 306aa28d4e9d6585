"""batcher configuration: ``INFERLINE_BATCHER_*`` environment variables or flags."""

from __future__ import annotations

from dataclasses import dataclass

from inferline import capacity
from inferline.config import require
from inferline.tls import Served, require_tls

PREFIX = "INFERLINE_BATCHER"


@dataclass(frozen=True)
class Config(Served):
    # Listen address (gRPC and /metrics) / gRPC port.
    host: str = "0.0.0.0"
    port: int = 8092
    metrics_port: int = 9182  # Prometheus /metrics
    # Triton, Envoy in front of several, or xds:///triton (proxyless, with GRPC_XDS_BOOTSTRAP);
    # every RPC but ModelInfer passes through.
    upstream_url: str = "localhost:8001"
    # Items per batch; 0 takes each model's max_batch_size from the upstream's model config
    # (a value above the upstream's is lowered to it).
    max_batch_size: int = 0
    # How long the oldest request of a partial batch waits for company; 0 sends at once.
    max_queue_delay_ms: float = 2.0
    # Requests (and their bytes) waiting per model; more are refused with RESOURCE_EXHAUSTED.
    # Sized for what the middlemen in front may admit (inferline.capacity).
    max_queue: int = capacity.BATCHER_QUEUE_REQUESTS
    max_queue_bytes: int = capacity.BATCHER_QUEUE_BYTES
    # Batches in flight to the upstream (all models), at most: about one per GPU behind it (the
    # local stack sets 8, its most replicas).
    max_inflight: int = 2
    # Fewer batches in flight while they queue at the upstream (one takes twice the fastest call
    # of its size or more: a slot less; one as fast, sent with every slot taken: a slot more),
    # so that one GPU gets full batches and many GPUs are all kept busy; gauge
    # inferline_batcher_inflight_limit_batches.
    adaptive_inflight: bool = True
    upstream_timeout_s: float = capacity.DEFAULT_DEADLINE_S  # deadline of calls that carry none
    # The message limit (a merged batch must fit it) / graceful-stop grace on SIGTERM.
    max_message_bytes: int = capacity.INNER_MESSAGE_BYTES
    grace_s: float = 5.0

    def __post_init__(self) -> None:
        require(0 <= self.port < 65536, PREFIX, "port", "must be a TCP port (0 picks one)")
        require(0 <= self.metrics_port < 65536, PREFIX, "metrics_port", "must be a TCP port")
        require(bool(self.upstream_url), PREFIX, "upstream_url", "must be host:port")
        require(self.max_batch_size >= 0, PREFIX, "max_batch_size", "must be >= 0 (0: upstream's)")
        require(self.max_queue_delay_ms >= 0, PREFIX, "max_queue_delay_ms", "must be >= 0")
        require(self.max_queue >= 1, PREFIX, "max_queue", "must be at least 1")
        require(self.max_queue_bytes >= 1, PREFIX, "max_queue_bytes", "must be positive")
        require(self.max_inflight >= 1, PREFIX, "max_inflight", "must be at least 1")
        require(self.upstream_timeout_s > 0, PREFIX, "upstream_timeout_s", "must be positive")
        require(self.max_message_bytes > 0, PREFIX, "max_message_bytes", "must be positive")
        require(self.grace_s >= 0, PREFIX, "grace_s", "must not be negative")
        require_tls(self, PREFIX)
