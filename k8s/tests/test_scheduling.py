"""Where the pods are scheduled and how many stay, as rendered: Triton's GPU (or MIG slice),
tolerations and GPU node affinity (GPU Feature Discovery's labels, or GKE's accelerator label)
with a preflight on the CUDA of Triton's image; the remote preprocess pool's GPUs; nothing of GPUs
in the cpu overlay; time-slicing and the NVIDIA runtime class; every tier spread over nodes and
zones, with an HPA; a drain leaves every gpu overlay tier serving.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from k8s.tests.manifests import OVERLAYS, find, pod_specs, render

# Triton's release → its CUDA (NVIDIA's support matrix); the DALI image's wheel is cuda120.
TRITON_CUDA = {"24.10": "12.6"}
DALI_CUDA = "12.0"


def triton_tag(spec: dict[str, Any]) -> str:
    [triton] = [c for c in spec["containers"] if c["name"] == "triton"]
    return str(triton["image"]).rsplit(":", 1)[1].removesuffix("-py3")


def check_triton_on_a_gpu(triton: dict[str, Any]) -> None:
    [main] = [c for c in triton["containers"] if c["name"] == "triton"]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in triton[
        "tolerations"
    ]
    # The driver check comes first, on the pod's GPU, against the CUDA of Triton's image.
    assert [c["name"] for c in triton["initContainers"]] == ["preflight", "models"]
    first = triton["initContainers"][0]
    assert first["image"].startswith("inferline/preflight:")
    assert first["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e.get("value") for e in first["env"]}
    assert env["INFERLINE_PREFLIGHT_CUDA"] == TRITON_CUDA[triton_tag(triton)]
    assert env["INFERLINE_PREFLIGHT_REQUIRE_GPU"] == "true"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"  # NVML only; the image sets none
    required = triton["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    [term] = required["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["key"] == "nvidia.com/gpu.memory"
    preferred = triton["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert preferred[0]["preference"]["matchExpressions"][0]["key"] == "nvidia.com/gpu.product"


def test_gpu_overlay_gives_triton_a_gpu_and_its_preprocess_none() -> None:
    """in-pod: the device plugin gives the pod's GPU to one container, Triton; the preprocess
    beside it has the DALI image (the gpu component's) but decodes with OpenCV on the CPU."""
    triton = find(render("overlays/gpu"), "Deployment", "triton")["spec"]["template"]["spec"]
    check_triton_on_a_gpu(triton)
    [preprocess] = [c for c in triton["containers"] if c["name"] == "preprocess"]
    assert preprocess["image"].startswith("inferline/preprocess-gpu:")
    assert "nvidia.com/gpu" not in str(preprocess["resources"])
    assert {"name": "INFERLINE_PREPROCESS_BACKEND", "value": "opencv"} in preprocess["env"]


def test_gpu_component_gives_the_remote_preprocess_pool_gpus() -> None:
    """The remote placement on GPUs (the base, gpu, preflight): a preprocess pool on dali-gpu."""
    objects = render("components/preflight")
    check_triton_on_a_gpu(find(objects, "Deployment", "triton")["spec"]["template"]["spec"])
    preprocess = find(objects, "Deployment", "preprocess")["spec"]["template"]["spec"]
    [main] = preprocess["containers"]
    assert main["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in preprocess[
        "tolerations"
    ]
    [first] = preprocess["initContainers"]
    assert first["name"] == "preflight" and first["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e.get("value") for e in first["env"]}
    assert env["INFERLINE_PREFLIGHT_CUDA"] == DALI_CUDA
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert main["image"].startswith("inferline/preprocess-gpu:")
    assert {"name": "INFERLINE_PREPROCESS_BACKEND", "value": "dali-gpu"} in main["env"]


def test_cpu_overlay_holds_nothing_of_gpus() -> None:
    objects = render("overlays/cpu")
    text = str([template for _, template in pod_specs(objects)])
    for needle in ("nvidia.com/gpu", "preflight", "preprocess-gpu", "dali-gpu"):
        assert needle not in text, f"the cpu overlay mentions {needle}"
    assert not [o for o in objects if "dcgm" in o["metadata"]["name"]], "no DCGM exporter"


def test_gpu_sharing_configures_time_slicing() -> None:
    config = find(render("components/gpu-sharing"), "ConfigMap", "inferline-time-slicing")
    sharing = yaml.safe_load(config["data"]["any"])
    assert sharing["version"] == "v1"
    slicing = sharing["sharing"]["timeSlicing"]
    assert slicing["failRequestsGreaterThanOne"] is True
    [resource] = slicing["resources"]
    assert resource["name"] == "nvidia.com/gpu" and resource["replicas"] >= 2


def test_runtime_class_component_sets_nvidia_on_the_gpu_pods_only() -> None:
    objects = render("components/nvidia-runtime-class")
    with_class = {
        obj["metadata"]["name"]
        for obj, template in pod_specs(objects)
        if template["spec"].get("runtimeClassName") == "nvidia"
    }
    assert with_class == {"triton", "preprocess", "dcgm-exporter"}


def floors(objects: list[dict[str, Any]]) -> dict[str, int]:
    """Each Deployment's fewest pods: its HPA's minReplicas, else its replicas (default 1)."""
    hpas = {
        o["spec"]["scaleTargetRef"]["name"]: o["spec"]["minReplicas"]
        for o in objects
        if o["kind"] == "HorizontalPodAutoscaler"
    }
    return {
        o["metadata"]["name"]: hpas.get(o["metadata"]["name"], o["spec"].get("replicas", 1))
        for o in objects
        if o["kind"] == "Deployment"
    }


def test_a_drain_leaves_every_gpu_overlay_tier_serving() -> None:
    """In the gpu overlay every PodDisruptionBudget's Deployment keeps a pod while a drain takes
    the most it allows (Triton too: its HPA starts at 2). The cpu overlay runs one of each (a
    laptop), where the budgets let a drain through rather than block it (their comment says so)."""
    objects = render("overlays/gpu")
    floor = floors(objects)
    budgets = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert budgets
    for budget in budgets:
        target = budget["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
        if target not in floor:  # not a Deployment of this overlay (a DaemonSet's, say)
            continue
        left = floor[target] - int(budget["spec"]["maxUnavailable"])
        assert left >= 1, f"a drain may take {target} from {floor[target]} to {left}"
    assert floor["triton"] >= 2
    assert floors(render("overlays/cpu"))["triton"] == 1


def test_gke_schedules_on_its_accelerator_label_not_gfds() -> None:
    """components/gke: Triton and the DCGM exporter schedule on GKE's
    cloud.google.com/gke-accelerator, which GKE's GPU nodes carry without GFD."""
    objects = render("components/gke")
    triton = find(objects, "Deployment", "triton")["spec"]["template"]["spec"]
    affinity = triton["affinity"]["nodeAffinity"]
    [term] = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    [expression] = term["matchExpressions"]
    assert expression["key"] == "cloud.google.com/gke-accelerator"
    assert {"nvidia-tesla-t4", "nvidia-l4"} <= set(expression["values"])
    assert "nvidia.com/" not in yaml.safe_dump(affinity)  # no GFD label left to wait for
    dcgm = find(objects, "DaemonSet", "dcgm-exporter")["spec"]["template"]["spec"]
    terms = dcgm["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = [e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]]
    assert "cloud.google.com/gke-accelerator" in keys and "nvidia.com/gpu.present" in keys


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_tier_spreads_over_nodes_and_zones_and_scales(overlay: str) -> None:
    """Each pipeline Deployment spreads its replicas over nodes, then zones (never blocking a
    one-node cluster), and has an HPA; Triton's pods come first when the cluster is full (gpu)."""
    objects = render(f"overlays/{overlay}")
    hpas = {o["spec"]["scaleTargetRef"]["name"] for o in objects
            if o["kind"] == "HorizontalPodAutoscaler"}  # fmt: skip
    for name in ("eds", "envoy", "middleman", "batcher", "triton"):
        spec = find(objects, "Deployment", name)["spec"]["template"]["spec"]
        spread = {c["topologyKey"]: c for c in spec["topologySpreadConstraints"]}
        assert set(spread) == {"kubernetes.io/hostname", "topology.kubernetes.io/zone"}, name
        for constraint in spread.values():
            assert constraint["whenUnsatisfiable"] == "ScheduleAnyway", name
            assert constraint["labelSelector"] == {"matchLabels": {"app.kubernetes.io/name": name}}
    assert hpas == {"triton", "middleman", "batcher", "envoy"}  # eds: two, fixed (ADS streams)
    triton = find(objects, "Deployment", "triton")["spec"]["template"]["spec"]
    if overlay == "gpu":
        assert (
            triton["priorityClassName"]
            == find(objects, "PriorityClass", "inferline-gpu")["metadata"]["name"]
        )
    else:
        assert "priorityClassName" not in triton


def test_mig_gives_triton_a_slice_instead_of_a_gpu() -> None:
    """components/gpu-mig (mixed strategy): Triton and its preflight ask for one MIG slice, on
    nodes that advertise slices by profile; nothing in the pod asks for a whole GPU."""
    objects = render("components/gpu-mig")
    pod = find(objects, "Deployment", "triton")["spec"]["template"]["spec"]
    asked = {
        c["name"]: c.get("resources", {}).get("limits", {})
        for c in (*pod["initContainers"], *pod["containers"])
    }
    assert asked["triton"]["nvidia.com/mig-1g.10gb"] == asked["preflight"]["nvidia.com/mig-1g.10gb"]
    assert not [name for name, limits in asked.items() if "nvidia.com/gpu" in limits]
    [term] = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert {"key": "nvidia.com/mig.strategy", "operator": "In", "values": ["mixed"]} in term[
        "matchExpressions"
    ]
