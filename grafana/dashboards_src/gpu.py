"""inferline / GPU: GPU utilisation, memory (per replica, per model, per pod) and power, from
Triton and, in Kubernetes, the DCGM exporter; Triton's compute time and host figures on any
machine."""

from __future__ import annotations

from collections.abc import Sequence

from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models.dashboard import Dashboard, Panel

from grafana.dashboards_src.base import inferline_dashboard
from grafana.dashboards_src.panels import Query, timeseries_panel
from grafana.dashboards_src.promql import selector, sum_rate, triton_mean

UID = "inferline-gpu"
FILENAME = "gpu.json"

NEEDS_A_GPU = "Needs a GPU: empty on a machine without one."
KUBERNETES_ONLY = "Kubernetes only (the DCGM exporter, with its pod mapping); empty elsewhere."
# The DCGM exporter's series of a GPU some pod holds.
HELD = 'pod!=""'


def per_gpu(metric: str) -> str:
    return f"max by (replica, gpu_uuid) ({selector(metric)})"


def per_pod(metric: str) -> str:
    return f"max by (namespace, pod) ({selector(metric, HELD)})"


def triton_gpus() -> Sequence[Builder[Panel]]:
    return [
        timeseries_panel(
            "GPU utilisation per replica (Triton)",
            "How busy is each Triton replica's GPU? Triton's nv_gpu_utilization per replica and "
            f"GPU. {NEEDS_A_GPU}",
            "percentunit",
            [Query("{{replica}} {{gpu_uuid}}", per_gpu("nv_gpu_utilization"))],
            width=12,
            maximum=1,
        ),
        timeseries_panel(
            "GPU power per replica (Triton)",
            "How much power does each replica's GPU draw? Triton's nv_gpu_power_usage in watts. "
            f"{NEEDS_A_GPU}",
            "watt",
            [Query("{{replica}} {{gpu_uuid}}", per_gpu("nv_gpu_power_usage"))],
            width=12,
        ),
        timeseries_panel(
            "GPU memory used per replica (Triton)",
            "How much GPU memory is in use on each replica's GPU, and how much is there? "
            "Triton's nv_gpu_memory_used_bytes per replica and GPU, and each GPU's total. "
            f"{NEEDS_A_GPU}",
            "bytes",
            [
                Query("{{replica}} {{gpu_uuid}} used", per_gpu("nv_gpu_memory_used_bytes")),
                Query(
                    "{{gpu_uuid}} total",
                    f"max by (gpu_uuid) ({selector('nv_gpu_memory_total_bytes')})",
                ),
            ],
            width=12,
        ),
        timeseries_panel(
            "GPU memory used per model (Triton)",
            "How much GPU memory does each model take? The memory in use on the GPUs a replica "
            "sees, labelled with the models that replica serves (Triton reports memory per "
            "device, not per model: exact with one model per replica and one replica per GPU). "
            f"{NEEDS_A_GPU}",
            "bytes",
            [
                Query(
                    "{{model}} on {{replica}}",
                    f"sum by (replica) ({selector('nv_gpu_memory_used_bytes')})"
                    " * on (replica) group_right () "
                    f"group by (replica, model) ({selector('nv_inference_count')})",
                )
            ],
            width=12,
        ),
    ]


def dcgm() -> Sequence[Builder[Panel]]:
    return [
        timeseries_panel(
            "GPU utilisation per pod (DCGM)",
            "How busy is the GPU each pod holds? DCGM_FI_DEV_GPU_UTIL (percent, shown as a "
            f"fraction) by namespace and pod. {KUBERNETES_ONLY}",
            "percentunit",
            [Query("{{namespace}}/{{pod}}", f"{per_pod('DCGM_FI_DEV_GPU_UTIL')} / 100")],
            width=8,
            maximum=1,
        ),
        timeseries_panel(
            "GPU memory used per pod (DCGM)",
            "How much GPU memory does each pod use — the per-pod figure Kubernetes itself does "
            "not give? DCGM_FI_DEV_FB_USED (MiB, shown in bytes) of the GPU assigned to each pod; "
            "pods sharing a time-sliced GPU each show the whole device's use. "
            f"{KUBERNETES_ONLY}",
            "bytes",
            [Query("{{namespace}}/{{pod}}", f"{per_pod('DCGM_FI_DEV_FB_USED')} * 1048576")],
            width=8,
        ),
        timeseries_panel(
            "GPU power per pod (DCGM)",
            "How much power does the GPU each pod holds draw? DCGM_FI_DEV_POWER_USAGE in watts "
            f"by namespace and pod. {KUBERNETES_ONLY}",
            "watt",
            [Query("{{namespace}}/{{pod}}", per_pod("DCGM_FI_DEV_POWER_USAGE"))],
            width=8,
        ),
    ]


def triton_work() -> Sequence[Builder[Panel]]:
    return [
        timeseries_panel(
            "Compute busy per replica (Triton)",
            "What fraction of the time is each replica's model executing — the GPU's (or CPU's) "
            "duty cycle as Triton measures it, on any machine? Executions per second times the "
            "mean compute time per execution; above 100% means several instances executing at "
            "once.",
            "percentunit",
            [
                Query(
                    "{{replica}}",
                    f"{sum_rate('nv_inference_compute_infer_duration_us', labels='replica')}"
                    f" / {sum_rate('nv_inference_request_success', labels='replica')}"
                    f" * {sum_rate('nv_inference_exec_count', labels='replica')} / 1e6",
                )
            ],
            width=12,
        ),
        timeseries_panel(
            "Compute time per request, per replica: input, infer, output",
            "Where does a Triton request's compute time go on each replica? Mean time copying "
            "inputs in, executing the model, and copying outputs out, per request.",
            "s",
            [
                Query(
                    f"{{{{replica}}}} {part}",
                    triton_mean(f"nv_inference_compute_{part}_duration_us", labels="replica"),
                )
                for part in ("input", "infer", "output")
            ],
            width=12,
        ),
        timeseries_panel(
            "Host CPU utilisation (Triton's view)",
            "How busy are the CPUs of the machine (or node) each Triton replica runs on? "
            "Triton's nv_cpu_utilization, exported with or without a GPU.",
            "percentunit",
            [Query("{{replica}}", f"max by (replica) ({selector('nv_cpu_utilization')})")],
            width=12,
            maximum=1,
        ),
        timeseries_panel(
            "Host memory used (Triton's view)",
            "How much RAM is in use on the machine (or node) each Triton replica runs on, out of "
            "how much? Triton's nv_cpu_memory_used_bytes and nv_cpu_memory_total_bytes.",
            "bytes",
            [
                Query(
                    "{{replica}} used",
                    f"max by (replica) ({selector('nv_cpu_memory_used_bytes')})",
                ),
                Query("total", f"max({selector('nv_cpu_memory_total_bytes')})"),
            ],
            width=12,
        ),
    ]


def build() -> Dashboard:
    return inferline_dashboard(
        UID,
        "GPU",
        "GPU utilisation, memory (per replica, per model, per pod) and power, from Triton and, "
        "in Kubernetes, the DCGM exporter; Triton's compute time and host figures on any machine.",
        [
            ("GPUs as Triton sees them (local and Kubernetes)", triton_gpus()),
            ("GPUs per pod: DCGM exporter (Kubernetes)", dcgm()),
            ("Triton's work and its machine (with or without a GPU)", triton_work()),
        ],
    )
