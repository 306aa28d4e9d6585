"""inferline / Pipeline: throughput, end-to-end latency, errors by status and hop, and where a
request's time goes."""

from __future__ import annotations

from collections.abc import Sequence

from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models.common import BigValueTextMode
from grafana_foundation_sdk.models.dashboard import Dashboard, Panel

from grafana.dashboards_src.base import inferline_dashboard
from grafana.dashboards_src.panels import Query, stat_panel, timeseries_panel
from grafana.dashboards_src.promql import (
    EVERY_HOP,
    TRITON_CLUSTER,
    error_ratio,
    mean,
    quantile,
    selector,
    sum_rate,
    triton_mean,
)

UID = "inferline-pipeline"
FILENAME = "pipeline.json"

IMAGES = "inferline_middleman_images_total"
# Envoy's public listener: a request as the client sees it.
CLIENT_VIEW = "envoy_http_downstream_rq_time"
PUBLIC = 'envoy_http_conn_manager_prefix="middleman"'
MIDDLEMAN_DURATION = "inferline_middleman_grpc_request_duration_seconds"
MODEL_INFER = 'method="ModelInfer"'
STAGE = "inferline_middleman_stage_duration_seconds"
DECODE_STAGE = 'stage="decode"'
INFER_STAGE = 'stage="infer"'
POSTPROCESS_STAGE = 'stage="postprocess"'
DECODE = "inferline_preprocess_decode_duration_seconds"
IMAGE = 'media="image"'
QUEUE = "inferline_batcher_queue_delay_seconds"
UPSTREAM = "inferline_batcher_upstream_duration_seconds"
UPSTREAM_TIME = "envoy_cluster_upstream_rq_time"
TRITON_OK = "nv_inference_request_success"
TRITON_FAILED = "nv_inference_request_failure"


def grpc_requests(service: str) -> str:
    return f"inferline_{service}_grpc_requests_total"


def overview() -> Sequence[Builder[Panel]]:
    return [
        stat_panel(
            "Images/s",
            "How many images a second is the pipeline classifying right now? Images answered by "
            "middleman, every model.",
            "suffix: images/s",
            Query("images/s", sum_rate(IMAGES)),
            width=6,
            decimals=1,
        ),
        stat_panel(
            "End-to-end p99 (client's view)",
            "How long do the slowest 1% of requests take, as the client sees them? Envoy's public "
            "listener (:8080), from first byte in to last byte out.",
            "ms",
            Query("p99", quantile(0.99, CLIENT_VIEW, PUBLIC)),
            width=6,
            thresholds=((None, "green"), (500, "orange"), (2000, "red")),
        ),
        stat_panel(
            "Failed requests (public API)",
            "What fraction of the public API's requests ended with a gRPC status other than OK? 0 "
            "when nothing fails (never empty).",
            "percentunit",
            Query("failed", error_ratio(grpc_requests("middleman"))),
            width=6,
            decimals=2,
            thresholds=((None, "green"), (0.001, "orange"), (0.01, "red")),
        ),
        stat_panel(
            "Triton replicas in rotation",
            "How many Triton replicas is Envoy sending requests to right now (healthy members of "
            "the triton cluster)?",
            "none",
            Query(
                "replicas", f"sum({selector('envoy_cluster_membership_healthy', TRITON_CLUSTER)})"
            ),
            width=6,
            decimals=0,
        ),
        timeseries_panel(
            "Images/s by model",
            "How many images a second does each public model classify? The pipeline's throughput; "
            "it should move when Triton replicas are added.",
            "suffix: images/s",
            [Query("{{model}}", sum_rate(IMAGES, labels="model"))],
            width=12,
        ),
        timeseries_panel(
            "End-to-end latency p50 / p95 / p99",
            "How long does a request take from the client's side, and how much of it is middleman "
            "itself? p50/p95/p99 at Envoy's public listener (:8080); the 'inside middleman' line "
            "is middleman's own ModelInfer p99: a p99 at Envoy well above it is time spent in "
            "Envoy and the network (both are interpolated in histogram buckets).",
            "ms",
            [
                Query("p50", quantile(0.5, CLIENT_VIEW, PUBLIC)),
                Query("p95", quantile(0.95, CLIENT_VIEW, PUBLIC)),
                Query("p99", quantile(0.99, CLIENT_VIEW, PUBLIC)),
                Query(
                    "p99 inside middleman",
                    f"1000 * {quantile(0.99, MIDDLEMAN_DURATION, MODEL_INFER)}",
                ),
            ],
            width=12,
        ),
    ]


def errors() -> Sequence[Builder[Panel]]:
    return [
        timeseries_panel(
            "Requests/s by gRPC status, per hop",
            "Which hop answers with which gRPC status? Every service's requests by status code, "
            "OK included, stacked per hop (one stack each for middleman, preprocess, batcher, "
            "Triton; Triton counts the batches it receives): a band other than OK is an error, "
            "and the hop it sits in is where it came from.",
            "reqps",
            [
                *(
                    Query(f"{hop} {{{{code}}}}", sum_rate(grpc_requests(hop), labels="code"), hop)
                    for hop in ("middleman", "preprocess", "batcher")
                ),
                Query("triton OK", sum_rate(TRITON_OK), stack="triton"),
                Query("triton failed", sum_rate(TRITON_FAILED), stack="triton"),
            ],
            width=12,
            fill=30,
        ),
        timeseries_panel(
            "Error ratio per hop",
            "What fraction of each hop's requests fail? Non-OK gRPC statuses over all requests "
            "for middleman, preprocess and the batcher, Triton's failed over all inference "
            "requests; 0 when nothing fails.",
            "percentunit",
            [
                *(
                    Query(hop, error_ratio(grpc_requests(hop)))
                    for hop in ("middleman", "preprocess", "batcher")
                ),
                Query(
                    "triton",
                    f"{sum_rate(TRITON_FAILED)}"
                    f" / ({sum_rate(TRITON_OK)} + {sum_rate(TRITON_FAILED)})",
                ),
            ],
            width=12,
        ),
        timeseries_panel(
            "Envoy: responses by class and retries, per hop",
            "Does Envoy see failures or retry requests on any hop? Upstream responses by HTTP "
            "status class per cluster (gRPC errors travel inside 200s; 5xx here means a "
            "connection or transport failure) and the retries Envoy made (a backend going away). "
            "Retries over budget: retries Envoy refused because retries in flight had reached "
            "their budget (a fifth of the requests in flight), so a failing pool never gets a "
            "multiple of the load.",
            "reqps",
            [
                Query(
                    "{{envoy_cluster_name}} {{envoy_response_code_class}}xx",
                    sum_rate(
                        "envoy_cluster_upstream_rq_xx",
                        EVERY_HOP,
                        labels="envoy_cluster_name, envoy_response_code_class",
                    ),
                ),
                Query(
                    "{{envoy_cluster_name}} retries",
                    sum_rate(
                        "envoy_cluster_upstream_rq_retry", EVERY_HOP, labels="envoy_cluster_name"
                    ),
                ),
                Query(
                    "{{envoy_cluster_name}} retries over budget",
                    sum_rate(
                        "envoy_cluster_upstream_rq_retry_overflow",
                        EVERY_HOP,
                        labels="envoy_cluster_name",
                    ),
                ),
            ],
            width=8,
        ),
        timeseries_panel(
            "Batcher: refused, expired, cancelled",
            "Is the batcher dropping work? Requests refused because the queue was full "
            "(RESOURCE_EXHAUSTED), expired before dispatch and cancelled by the caller; all 0 on "
            "a healthy stack. Retries are Envoy's (the panel beside).",
            "reqps",
            [
                Query(legend, sum_rate(f"inferline_batcher_{what}_requests_total"))
                for legend, what in (
                    ("refused (queue full)", "rejected"),
                    ("expired before dispatch", "expired"),
                    ("cancelled by caller", "cancelled"),
                )
            ],
            width=8,
        ),
        timeseries_panel(
            "Admission: refused and expired, by reason",
            "Is the pipeline refusing work rather than queueing it? Requests middleman refused at "
            "admission, by reason (load: what is in flight would not finish within the caller's "
            "deadline; requests / bytes: a hard bound; message: over the size limit; deadline: "
            "shorter than the fastest answer), requests whose deadline passed before a stage "
            "could start, and preprocess's refusals. Refusals under a crowd are the design "
            "working: goodput holds at capacity.",
            "reqps",
            [
                Query(
                    "middleman refused: {{reason}}",
                    sum_rate("inferline_middleman_refused_requests_total", labels="reason"),
                ),
                Query(
                    "expired before {{stage}}",
                    sum_rate("inferline_middleman_expired_requests_total", labels="stage"),
                ),
                Query(
                    "preprocess refused: {{reason}}",
                    sum_rate("inferline_preprocess_refused_requests_total", labels="reason"),
                ),
            ],
            width=8,
        ),
    ]


def hops() -> list[Query]:
    """Mean time per request in each hop, in pipeline order (the stacked long-pole panel)."""
    decode = mean(DECODE, IMAGE)
    decoded_in_pod = (
        f"(({decode}) unless on() ({sum_rate(f'{STAGE}_count', DECODE_STAGE)} > 0))"
        " or on() vector(0)"
    )
    triton_compute = " + ".join(
        sum_rate(f"nv_inference_compute_{part}_duration_us")
        for part in ("input", "infer", "output")
    )
    return [
        Query("decode in preprocess", decode),
        Query(
            "to and from preprocess (Envoy, gRPC; in-process: decoding)",
            f"clamp_min({mean(STAGE, DECODE_STAGE)} - ({decode} or on() vector(0)), 0)"
            " or on() vector(0)",
        ),
        Query(
            "to and from the batcher (Envoy, gRPC)",
            f"clamp_min({mean(STAGE, INFER_STAGE)} - {mean(QUEUE)} - {mean(UPSTREAM)}, 0)",
        ),
        Query("batcher queue", mean(QUEUE)),
        Query(
            "batcher to Triton (Envoy, gRPC; in-pod: the GPU pod less its decoding)",
            f"clamp_min({mean(UPSTREAM)}"
            f" - {triton_mean('nv_inference_request_duration_us')}"
            f" - ({decoded_in_pod}), 0)",
        ),
        Query("Triton queue", triton_mean("nv_inference_queue_duration_us")),
        Query("Triton compute", f"({triton_compute}) / {sum_rate(TRITON_OK)} / 1e6"),
        Query("postprocess", mean(STAGE, POSTPROCESS_STAGE)),
    ]


def latency() -> Sequence[Builder[Panel]]:
    return [
        timeseries_panel(
            "Mean time per request by middleman stage (stacked)",
            "Which of middleman's stages takes the most time per request? Mean of decode (the "
            "preprocess call), infer (the batcher / Triton call) and postprocess (labels, top-k), "
            "stacked: the top of the stack is middleman's time per request and the widest band "
            "is the long pole.",
            "s",
            [Query("{{stage}}", mean(STAGE, labels="stage"))],
            width=12,
            stacked=True,
        ),
        timeseries_panel(
            "Where the time goes, hop by hop (stacked means)",
            "Which hop is the long pole? Mean time per request in each hop, in pipeline order and "
            "stacked so the widest band is the long pole: decoding in preprocess, the trip to and "
            "from preprocess (Envoy, gRPC, copying; 0 in-pod, where there is none; in-process, "
            "middleman's own decoding), the trip to the batcher, waiting in the batcher's queue, "
            "the batcher's trip to Triton (in-pod: to the GPU pod, less the decoding there), "
            "Triton's queue, Triton's compute (input, infer, output), postprocess. The transport "
            "bands are differences of means (middleman's stage minus what the hop behind it "
            "measured), floored at 0.",
            "s",
            hops(),
            width=12,
            stacked=True,
        ),
        timeseries_panel(
            "p99 per stage",
            "Where do the slowest requests spend their time? p99 of each of middleman's stages, "
            "of decoding in preprocess, of the batcher's queue wait and upstream call, and of the "
            "call to Triton as Envoy measures it (Triton exports no latency histogram).",
            "s",
            [
                Query("middleman {{stage}}", quantile(0.99, STAGE, labels="stage")),
                Query("preprocess decode", quantile(0.99, DECODE, IMAGE)),
                Query("batcher queue", quantile(0.99, QUEUE)),
                Query("batcher upstream call", quantile(0.99, UPSTREAM)),
                Query(
                    "Triton (Envoy's view)",
                    f"{quantile(0.99, UPSTREAM_TIME, TRITON_CLUSTER)} / 1000",
                ),
            ],
            width=12,
        ),
        timeseries_panel(
            "p99 per hop as Envoy sees it",
            "How long does each hop take from the Envoy in front of it? p99 of Envoy's upstream "
            "request time per cluster: middleman (the whole request), preprocess, batcher, Triton.",
            "ms",
            [
                Query(
                    "{{envoy_cluster_name}}",
                    quantile(0.99, UPSTREAM_TIME, EVERY_HOP, labels="envoy_cluster_name"),
                )
            ],
            width=12,
        ),
    ]


def decoding() -> Sequence[Builder[Panel]]:
    return [
        timeseries_panel(
            "Bytes/s through preprocess: encoded in, tensors out or through shared memory",
            "How much data does decoding move, and where? Encoded bytes received, tensor bytes "
            "sent back over the network (the remote placement: the blow-up from JPEG to uint8 "
            "tensors), and tensor bytes handed to the pod's Triton through shared memory (in-pod: "
            "none over the network).",
            "Bps",
            [
                Query(
                    "encoded {{media}} in",
                    sum_rate("inferline_preprocess_input_bytes_total", labels="media"),
                ),
                Query(
                    "tensors {{media}} out",
                    sum_rate("inferline_preprocess_output_bytes_total", labels="media"),
                ),
                Query(
                    "tensors to Triton through shared memory",
                    sum_rate("inferline_preprocess_shared_memory_bytes_total"),
                ),
            ],
            width=9,
        ),
        timeseries_panel(
            "Images/s decoded per backend",
            "Which decoder does the work, and how fast? Images decoded per second by preprocess, "
            "by backend (dali-gpu, dali-cpu, opencv).",
            "suffix: images/s",
            [Query("{{backend}}", sum_rate("inferline_preprocess_images_total", labels="backend"))],
            width=9,
        ),
        stat_panel(
            "Decoder in use",
            "Which decoding backend did preprocess choose for images and for video (dali-gpu with "
            "a GPU, else opencv; dali-cpu when configured)?",
            "none",
            Query(
                "{{media}}: {{backend}}",
                f"max by (backend, media) ({selector('inferline_preprocess_backend_info')})",
            ),
            width=6,
            height=8,
            show=BigValueTextMode.NAME,
        ),
    ]


def build() -> Dashboard:
    return inferline_dashboard(
        UID,
        "Pipeline",
        "Throughput, end-to-end latency, errors by status and hop, and where a request's time "
        "goes.",
        [
            ("Overview", overview()),
            ("Errors: by status and hop", errors()),
            ("Latency: where a request's milliseconds go", latency()),
            ("Decoding and data volume", decoding()),
        ],
    )
