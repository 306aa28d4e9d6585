"""PromQL selectors scoped by the dashboards' variables, and the shapes the panels repeat.

Every selector a panel writes goes through :func:`selector`, which adds the dashboard's
``cluster`` and ``namespace`` variables (every scraped series can carry them: Kubernetes targets
are labelled ``namespace``, a multi-cluster Prometheus adds ``cluster``) and, for a metric
labelled by model, the ``model`` variable. Their "All" value is ``.*``, which also matches a
missing label, so locally, where series have neither, every query matches what it did.
"""

from __future__ import annotations

RATE_INTERVAL = "$__rate_interval"

# Metrics labelled `model` (grafana/METRICS.md): Triton's per-model counters and gauges, and the
# names below. Histograms are named without their _bucket/_sum/_count suffix.
MODEL_PREFIXES = ("nv_inference_",)
MODEL_LABELLED = frozenset(
    {
        *(
            f"inferline_{service}_grpc_{name}"
            for service in ("middleman", "preprocess", "batcher", "eds")
            for name in (
                "requests_total",
                "request_duration_seconds",
                "received_bytes_total",
                "sent_bytes_total",
            )
        ),
        "inferline_middleman_images_total",
        "inferline_middleman_frames_total",
        "inferline_middleman_stage_duration_seconds",
        "inferline_middleman_refused_requests_total",
        "inferline_middleman_expired_requests_total",
        "inferline_batcher_batch_size_items",
        "inferline_batcher_batch_size_requests",
        "inferline_batcher_queue_delay_seconds",
        "inferline_batcher_upstream_duration_seconds",
        "inferline_batcher_queue_depth_requests",
        "inferline_batcher_inflight_batches",
        "inferline_batcher_rejected_requests_total",
        "inferline_batcher_expired_requests_total",
        "inferline_batcher_cancelled_requests_total",
        "inferline_batcher_failed_requests_total",
    }
)
# Metrics whose own `cluster` label is something else (eds: the Envoy cluster, i.e. the hop); a
# Prometheus keeps a series' label over an external one, so the variable cannot select them.
OWN_CLUSTER_LABEL = frozenset({"inferline_eds_endpoints", "inferline_eds_cluster_version_info"})

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def base_name(metric: str) -> str:
    """``metric`` without a histogram series' suffix."""
    for suffix in HISTOGRAM_SUFFIXES:
        if metric.endswith(suffix):
            return metric.removesuffix(suffix)
    return metric


def has_model(metric: str) -> bool:
    """Whether ``metric`` is labelled by model."""
    return metric.startswith(MODEL_PREFIXES) or base_name(metric) in MODEL_LABELLED


def scope(metric: str) -> list[str]:
    """The variable matchers that apply to ``metric``."""
    matchers = [] if metric in OWN_CLUSTER_LABEL else ['cluster=~"$cluster"']
    matchers.append('namespace=~"$namespace"')
    if has_model(metric):
        matchers.append('model=~"$model"')
    return matchers


def selector(metric: str, *matchers: str) -> str:
    """``metric{matchers…, cluster=~"$cluster", namespace=~"$namespace"[, model=~"$model"]}``."""
    return f"{metric}{{{', '.join([*matchers, *scope(metric)])}}}"


def rate(metric: str, *matchers: str) -> str:
    """``rate(<selector>[$__rate_interval])``."""
    return f"rate({selector(metric, *matchers)}[{RATE_INTERVAL}])"


def by(labels: str) -> str:
    """`` by (labels) `` for an aggregation, or nothing for no labels."""
    return f" by ({labels}) " if labels else ""


def sum_rate(metric: str, *matchers: str, labels: str = "") -> str:
    """``sum by (labels) (rate(<selector>[$__rate_interval]))``."""
    return f"sum{by(labels)}({rate(metric, *matchers)})"


def mean(histogram: str, *matchers: str, labels: str = "") -> str:
    """A histogram's mean over the rate interval: the rate of its sum over that of its count."""
    return (
        f"{sum_rate(f'{histogram}_sum', *matchers, labels=labels)}"
        f" / {sum_rate(f'{histogram}_count', *matchers, labels=labels)}"
    )


def quantile(q: float, histogram: str, *matchers: str, labels: str = "") -> str:
    """``histogram_quantile(q, sum by (le, labels) (rate(<histogram>_bucket…)))``."""
    grouping = f"le, {labels}" if labels else "le"
    buckets = rate(f"{histogram}_bucket", *matchers)
    return f"histogram_quantile({q}, sum by ({grouping}) ({buckets}))"


def triton_mean(counter_us: str, labels: str = "") -> str:
    """Triton's mean per request, in seconds, of a cumulative microseconds counter."""
    return (
        f"{sum_rate(counter_us, labels=labels)}"
        f" / {sum_rate('nv_inference_request_success', labels=labels)} / 1e6"
    )


def error_ratio(requests: str) -> str:
    """A gRPC server's failed fraction of its requests; 0 while none fail."""
    failed = sum_rate(requests, 'code!="OK"')
    return f"({failed} or vector(0)) / {sum_rate(requests)}"


# Envoy's clusters are the hops; xds is its own connection to the control plane.
TRITON_CLUSTER = 'envoy_cluster_name="triton"'
EVERY_HOP = 'envoy_cluster_name!="xds"'
