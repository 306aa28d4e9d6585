"""inferline / Scale-out: replicas per cluster over time, each Triton replica's share of the load,
batch sizes before and after the balancer, queues, and the control plane."""

from __future__ import annotations

from collections.abc import Sequence

from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models.dashboard import Dashboard, Panel

from grafana.dashboards_src.base import inferline_dashboard
from grafana.dashboards_src.panels import Query, timeseries_panel
from grafana.dashboards_src.promql import (
    EVERY_HOP,
    TRITON_CLUSTER,
    mean,
    quantile,
    selector,
    sum_rate,
    triton_mean,
)

UID = "inferline-scale-out"
FILENAME = "scale-out.json"

ENDPOINT_REQUESTS = "envoy_cluster_endpoint_rq_total"
BY_ENDPOINT = "envoy_endpoint_hostname"
OTHER_HOPS = 'envoy_cluster_name=~"middleman|preprocess"'
BATCHER_REQUESTS = "inferline_batcher_grpc_requests_total"
BATCH_ITEMS = "inferline_batcher_batch_size_items"
QUEUE_DEPTH = "inferline_batcher_queue_depth_requests"
QUEUE_DELAY = "inferline_batcher_queue_delay_seconds"


def replicas() -> Sequence[Builder[Panel]]:
    return [
        timeseries_panel(
            "Endpoints per cluster (control plane)",
            "How many replicas of each service does the control plane announce, and in which "
            "state? eds's endpoints by cluster and health (HEALTHY, DRAINING, UNHEALTHY): a step "
            "up is `make scale` (or Kubernetes) adding a replica. (Their `cluster` label is the "
            "hop, so the Cluster variable does not narrow this panel.)",
            "none",
            [
                Query(
                    "{{cluster}} {{health}}",
                    f"sum by (cluster, health) ({selector('inferline_eds_endpoints')})",
                )
            ],
            width=12,
            steps=True,
            decimals=0,
        ),
        timeseries_panel(
            "Endpoints in rotation per cluster (Envoy)",
            "Has Envoy taken up what the control plane announced? Healthy members of each "
            "cluster as Envoy sees them (after its first health check) and hosts outlier "
            "detection has ejected.",
            "none",
            [
                Query(
                    "{{envoy_cluster_name}} healthy",
                    "sum by (envoy_cluster_name) "
                    f"({selector('envoy_cluster_membership_healthy', EVERY_HOP)})",
                ),
                Query(
                    "{{envoy_cluster_name}} ejected",
                    "sum by (envoy_cluster_name) "
                    f"({selector('envoy_cluster_outlier_detection_ejections_active', EVERY_HOP)})",
                ),
            ],
            width=12,
            steps=True,
            decimals=0,
        ),
    ]


def load_balancing() -> Sequence[Builder[Panel]]:
    per_endpoint = sum_rate(ENDPOINT_REQUESTS, TRITON_CLUSTER, labels=BY_ENDPOINT)
    return [
        timeseries_panel(
            "Requests/s per Triton replica (Envoy)",
            "Does a new Triton replica take its share of the load, and how fast? Requests per "
            "second Envoy sends to each Triton endpoint (per-endpoint stats): a new replica's "
            "line rises to meet the others within seconds of its first health check.",
            "reqps",
            [Query("{{envoy_endpoint_hostname}}", per_endpoint)],
            width=12,
        ),
        timeseries_panel(
            "Share of Triton requests per replica",
            "Is the load spread evenly? Each Triton replica's fraction of the requests Envoy "
            "sends to Triton, stacked to 100%: with N healthy replicas each band settles near 1/N.",
            "percentunit",
            [
                Query(
                    "{{envoy_endpoint_hostname}}",
                    f"{per_endpoint} / on () group_left () "
                    f"{sum_rate(ENDPOINT_REQUESTS, TRITON_CLUSTER)}",
                )
            ],
            width=12,
            stacked=True,
            maximum=1,
        ),
        timeseries_panel(
            "Requests in flight per Triton replica (Envoy)",
            "Is any replica holding more work than the others? Requests Envoy has in flight to "
            "each Triton endpoint (the least-request balancer evens these out).",
            "none",
            [
                Query(
                    "{{envoy_endpoint_hostname}}",
                    f"sum by ({BY_ENDPOINT}) "
                    f"({selector('envoy_cluster_endpoint_rq_active', TRITON_CLUSTER)})",
                )
            ],
            width=8,
        ),
        timeseries_panel(
            "Images/s per Triton replica (Triton)",
            "How many images does each Triton replica infer per second? Triton's own count, the "
            "cross-check of Envoy's per-endpoint requests (a request carries a whole batch).",
            "suffix: images/s",
            [Query("{{replica}}", sum_rate("nv_inference_count", labels="replica"))],
            width=8,
        ),
        timeseries_panel(
            "Failed requests per Triton replica (Envoy)",
            "Is one replica failing requests? Envoy's per-endpoint request errors to each Triton "
            "endpoint per second; 0 on a healthy stack.",
            "reqps",
            [
                Query(
                    "{{envoy_endpoint_hostname}}",
                    sum_rate("envoy_cluster_endpoint_rq_error", TRITON_CLUSTER, labels=BY_ENDPOINT),
                )
            ],
            width=8,
        ),
        timeseries_panel(
            "Requests/s per replica, every other hop",
            "How is the load spread over the replicas of middleman, preprocess and the batcher? "
            "Envoy's per-endpoint requests per second for middleman and preprocess; the "
            "batcher's own requests received per replica, since middleman dials the batchers "
            "proxyless by default (no Envoy counts them then).",
            "reqps",
            [
                Query(
                    "{{envoy_cluster_name}} {{envoy_endpoint_hostname}}",
                    sum_rate(
                        ENDPOINT_REQUESTS, OTHER_HOPS, labels=f"envoy_cluster_name, {BY_ENDPOINT}"
                    ),
                ),
                Query(
                    "batcher {{replica}}",
                    sum_rate(BATCHER_REQUESTS, 'method="ModelInfer"', labels="replica"),
                ),
            ],
            width=24,
        ),
    ]


def batching() -> Sequence[Builder[Panel]]:
    return [
        timeseries_panel(
            "Batch size before and after the balancer",
            "Do full batches reach the GPUs? Mean items per upstream call as the batcher forms "
            "them (before Envoy balances them over the replicas) and mean batch size each Triton "
            "replica executes (inferences / executions; after the balancer, including Triton's "
            "own batching).",
            "none",
            [
                Query("batcher {{model}} (before the balancer)", mean(BATCH_ITEMS, labels="model")),
                Query(
                    "{{replica}} {{model}} (at Triton)",
                    f"{sum_rate('nv_inference_count', labels='replica, model')}"
                    f" / {sum_rate('nv_inference_exec_count', labels='replica, model')}",
                ),
            ],
            width=12,
        ),
        timeseries_panel(
            "Batcher batch size p50 / p95, requests per batch",
            "How big are the batcher's batches, and how many requests does one merge? p50 and "
            "p95 items per upstream call (interpolated in the histogram's buckets; a batch holds "
            "at least one item), and the mean number of client requests merged into one call.",
            "none",
            [
                Query(
                    "{{model}} items p50",
                    f"clamp_min({quantile(0.5, BATCH_ITEMS, labels='model')}, 1)",
                ),
                Query(
                    "{{model}} items p95",
                    f"clamp_min({quantile(0.95, BATCH_ITEMS, labels='model')}, 1)",
                ),
                Query(
                    "{{model}} requests per batch (mean)",
                    mean("inferline_batcher_batch_size_requests", labels="model"),
                ),
            ],
            width=12,
        ),
        timeseries_panel(
            "Batcher queue depth and batches in flight",
            "Is work piling up in front of the GPUs? Requests waiting in each batcher replica's "
            "queue per model, and batches sent upstream and not yet answered (bounded by "
            "MAX_INFLIGHT).",
            "none",
            [
                Query(
                    "{{replica}} {{model}} waiting",
                    f"sum by (replica, model) ({selector(QUEUE_DEPTH)})",
                ),
                Query(
                    "{{replica}} batches in flight",
                    f"sum by (replica) ({selector('inferline_batcher_inflight_batches')})",
                ),
            ],
            width=8,
        ),
        timeseries_panel(
            "Batcher queue fill (depth / MAX_QUEUE)",
            "How close is the batcher to refusing work? Each model's queue depth over the "
            "configured bound (MAX_QUEUE); at 100% new requests get RESOURCE_EXHAUSTED.",
            "percentunit",
            [
                Query(
                    "{{replica}} {{model}}",
                    f"max by (replica, model) ({selector(QUEUE_DEPTH)}) / on (replica) "
                    "group_left () max by (replica) "
                    f"({selector('inferline_batcher_queue_capacity_requests')})",
                )
            ],
            width=8,
        ),
        timeseries_panel(
            "Batcher queue delay: mean and p99",
            "How long does a request wait in the batcher for company before its batch goes "
            "upstream? Mean and p99 per model (bounded by MAX_QUEUE_DELAY_MS unless the upstream "
            "is saturated).",
            "s",
            [
                Query("{{model}} mean", mean(QUEUE_DELAY, labels="model")),
                Query("{{model}} p99", quantile(0.99, QUEUE_DELAY, labels="model")),
            ],
            width=8,
        ),
        timeseries_panel(
            "Triton queue time per request, per replica",
            "Is a Triton replica saturated? Mean time a request waits in each replica's queue "
            "before it executes; a rising line means that replica needs help (scale out).",
            "s",
            [Query("{{replica}}", triton_mean("nv_inference_queue_duration_us", labels="replica"))],
            width=12,
        ),
        timeseries_panel(
            "Triton requests pending per replica",
            "How many requests is each Triton replica holding that have not started executing?",
            "none",
            [
                Query(
                    "{{replica}}",
                    f"sum by (replica) ({selector('nv_inference_pending_request_count')})",
                )
            ],
            width=12,
        ),
    ]


def control_plane() -> Sequence[Builder[Panel]]:
    return [
        timeseries_panel(
            "Envoys connected to the control plane",
            "Is every Envoy subscribed to eds, and is eds's endpoint cache ready? Connected xDS "
            "streams by API (sotw, delta) and the cache-ready flag (1 once the source was read).",
            "none",
            [
                Query(
                    "{{api}} streams",
                    f"sum by (api) ({selector('inferline_eds_connected_proxies')})",
                ),
                Query("cache ready", f"max({selector('inferline_eds_cache_ready')})"),
            ],
            width=8,
            steps=True,
            decimals=0,
        ),
        timeseries_panel(
            "xDS pushes/s by type and reason",
            "How often does eds push, and why? Responses sent per second by resource type and "
            "reason (change: the endpoints changed; request: a client asked).",
            "ops",
            [
                Query(
                    "{{type}} ({{reason}})",
                    sum_rate("inferline_eds_pushes_total", labels="type, reason"),
                )
            ],
            width=8,
        ),
        timeseries_panel(
            "From push to Envoy's ACK, p99",
            "How long does Envoy take to accept what eds sends? p99 from a response sent to the "
            "client's ACK (or NACK), by resource type; empty between changes.",
            "s",
            [
                Query(
                    "{{type}}",
                    quantile(0.99, "inferline_eds_ack_duration_seconds", labels="type"),
                )
            ],
            width=8,
        ),
    ]


def build() -> Dashboard:
    return inferline_dashboard(
        UID,
        "Scale-out",
        "Replicas per cluster over time, each Triton replica's share of the load, batch sizes "
        "before and after the balancer, queues, and the control plane.",
        [
            ("Replicas: what the control plane announces and Envoy uses", replicas()),
            ("Load balancing: each Triton replica's share", load_balancing()),
            ("Batching and queues: before and after the balancer", batching()),
            ("Control plane (eds)", control_plane()),
        ],
    )
