"""Both overlays and every component render with ``kubectl kustomize``, and every rendered object
validates against the Kubernetes 1.32 schema (kubernetes-validate, strict: an unknown field is an
error, as ``kubectl apply --validate=strict`` makes it).

The Prometheus Operator's custom resources (components/monitoring-operator: PodMonitor,
PrometheusRule) and cert-manager's (components/tls: Certificate, Issuer) have no schema there:
they are skipped by kubernetes-validate, and checked here for the fields their operator needs
instead. Every other kind must have a schema.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from k8s.tests.manifests import (
    AFTER_PLACEMENT,
    ALL_BUT_PLACEMENTS,
    ALTERNATIVES,
    COMPONENT_NEEDS,
    EVERYTHING,
    INCLUDED,
    K8S,
    KUBERNETES_VERSION,
    NAMESPACE,
    OVERLAYS,
    PLACEMENTS,
    TARGETS,
    containers,
    find,
    pod_specs,
    render,
)

OPERATOR_GROUP = "monitoring.coreos.com/"
OPERATOR_KINDS = {"PodMonitor", "PrometheusRule"}
CERT_MANAGER_GROUP = "cert-manager.io/"
CERT_MANAGER_KINDS = {"Certificate", "Issuer"}
# Namespaces an object may name: the pipeline's, the DCGM exporter's, kube-system (the adapter's
# reader of the API server's client CA, a RoleBinding) and the GPU Operator's (the time-slicing
# configuration the device plugin reads).
NAMESPACES = {NAMESPACE, "inferline-dcgm", "kube-system", "gpu-operator"}
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "APIService", "PriorityClass"}
# Images per k8s/CONTRACT.md: the kustomize image names `make deploy` replaces.
CONTRACT_IMAGES = set(re.findall(r"`(inferline/[a-z-]+)`", (K8S / "CONTRACT.md").read_text()))


def test_every_component_is_covered() -> None:
    """A new component must be added to COMPONENT_NEEDS (and so to these tests)."""
    folders = {p.name for p in (K8S / "components").iterdir() if p.is_dir()}
    assert folders == set(COMPONENT_NEEDS)
    everything_or_alternative = (
        *ALL_BUT_PLACEMENTS, *PLACEMENTS, *AFTER_PLACEMENT, *ALTERNATIVES, *INCLUDED,
    )  # fmt: skip
    assert sorted(everything_or_alternative) == sorted(COMPONENT_NEEDS)
    # An included component is in `everything` through the one that includes it, which is.
    includes = {
        Path(nested).name: name
        for name in COMPONENT_NEEDS
        for nested in yaml.safe_load(
            (K8S / "components" / name / "kustomization.yaml").read_text()
        ).get("components") or []
    }  # fmt: skip
    assert includes == INCLUDED
    assert set(INCLUDED.values()) <= set(EVERYTHING)
    placement = len(EVERYTHING) - len(AFTER_PLACEMENT) - 1
    assert EVERYTHING[placement] in PLACEMENTS
    assert not set(EVERYTHING) - {EVERYTHING[placement]} & set(PLACEMENTS)
    assert {p.name for p in (K8S / "overlays").iterdir() if p.is_dir()} == set(OVERLAYS)


@pytest.mark.parametrize("target", TARGETS)
def test_renders_and_validates_strictly(target: str) -> None:
    objects = render(target)
    assert objects, f"{target} renders nothing"
    failures = []
    for obj in objects:
        where = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
        if obj["apiVersion"].startswith(OPERATOR_GROUP):
            assert obj["kind"] in OPERATOR_KINDS, f"{where}: an unexpected custom resource"
            check_operator_resource(obj)
            continue
        if obj["apiVersion"].startswith(CERT_MANAGER_GROUP):
            assert obj["kind"] in CERT_MANAGER_KINDS, f"{where}: an unexpected custom resource"
            check_cert_manager_resource(obj, objects)
            continue
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            failures.append(f"{where}: {path}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError as exc:
            failures.append(f"{where}: no schema ({exc.message})")
    assert not failures, f"{target} against Kubernetes {KUBERNETES_VERSION}:\n" + "\n".join(
        failures
    )


def check_operator_resource(obj: dict[str, Any]) -> None:
    where = f"{obj['kind']} {obj['metadata']['name']}"
    assert obj["apiVersion"] == "monitoring.coreos.com/v1", where
    assert obj["metadata"].get("namespace") == NAMESPACE, where
    spec = obj["spec"]
    if obj["kind"] == "PodMonitor":
        assert spec["selector"]["matchExpressions"], where
        for endpoint in spec["podMetricsEndpoints"]:
            assert endpoint["port"] in ("metrics", "prep-metrics", "probe"), where
            jobs = [r for r in endpoint["relabelings"] if r.get("targetLabel") == "job"]
            assert len(jobs) == 1, f"{where}: sets the job label once"
    else:
        for group in spec["groups"]:
            assert group["name"] and group["rules"], where


def check_cert_manager_resource(obj: dict[str, Any], objects: list[dict[str, Any]]) -> None:
    """cert-manager v1: a Certificate names its Secret, DNS names (a server's) and an Issuer
    rendered beside it (or a ClusterIssuer); an Issuer says how it signs."""
    where = f"{obj['kind']} {obj['metadata']['name']}"
    assert obj["apiVersion"] == "cert-manager.io/v1", where
    assert obj["metadata"].get("namespace") == NAMESPACE, where
    spec = obj["spec"]
    if obj["kind"] == "Issuer":
        assert {"selfSigned", "ca", "acme", "vault"} & set(spec), where
        return
    assert spec["secretName"], where
    # A server's certificate names what clients dial (cert-manager's default usages include
    # server auth); a CA, or a client's certificate, names no host.
    server = "server auth" in spec.get("usages", ["server auth"]) and not spec.get("isCA")
    assert bool(spec.get("dnsNames")) == server, f"{where}: dnsNames exactly for a server"
    issuer = spec["issuerRef"]
    if issuer.get("kind", "Issuer") == "Issuer":
        find(objects, "Issuer", issuer["name"])


@pytest.mark.parametrize("target", TARGETS)
def test_every_object_is_labelled_and_namespaced(target: str) -> None:
    for obj in render(target):
        meta = obj["metadata"]
        where = f"{obj['kind']} {meta['name']}"
        labels = meta.get("labels") or {}
        assert labels.get("app.kubernetes.io/part-of") == "inferline", where
        assert labels.get("app.kubernetes.io/name"), where
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in meta, where
        else:
            # Explicit, never the kubectl context's: a component object without one would land
            # wherever the user's context points.
            assert meta.get("namespace") in NAMESPACES, (
                f"{where}: namespace {meta.get('namespace')}"
            )


@pytest.mark.parametrize("target", TARGETS)
def test_selectors_use_the_name_label(target: str) -> None:
    for obj, template in pod_specs(render(target)):
        where = f"{obj['kind']} {obj['metadata']['name']}"
        name = obj["metadata"]["labels"]["app.kubernetes.io/name"]
        assert obj["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": name}}, where
        assert template["metadata"]["labels"]["app.kubernetes.io/name"] == name, where
        assert template["metadata"]["labels"]["app.kubernetes.io/part-of"] == "inferline", where
    for service in (o for o in render(target) if o["kind"] == "Service"):
        name = service["metadata"]["name"]
        label = service["metadata"]["labels"]["app.kubernetes.io/name"]
        assert service["spec"]["selector"] == {"app.kubernetes.io/name": label}, name
        assert name in (label, f"{label}-rest", f"{label}-public"), f"{name}: named for its pods"


# -- the contract (k8s/CONTRACT.md) ---------------------------------------------------------

# The remote placement's (the base's): each Deployment's container of its name.
SERVICE_PORTS = {
    "middleman": {"grpc": 8090},
    "middleman-rest": {"http": 8093},
    "preprocess": {"grpc": 8091},
    "batcher": {"grpc": 8092},
    "triton": {"grpc": 8001},
    "eds": {"grpc": 18000},
    "envoy": {"grpc": 8080, "preprocess": 8081, "batcher": 8082, "triton": 8083},
}
CONTAINER_PORTS = {  # (Deployment, container) -> ports
    ("middleman", "middleman"): {"grpc": 8090, "http": 8093, "metrics": 9180},
    ("preprocess", "preprocess"): {"grpc": 8091, "metrics": 9181},
    ("batcher", "batcher"): {"grpc": 8092, "metrics": 9182},
    ("eds", "eds"): {"grpc": 18000, "metrics": 9183},
    ("envoy", "envoy"): {
        "grpc": 8080, "preprocess": 8081, "batcher": 8082, "triton": 8083, "probe": 9902,
    },
    ("triton", "triton"): {"http": 8000, "grpc": 8001, "metrics": 8002},
}  # fmt: skip
# in-pod: no preprocess pool; the GPU pod's front door is its preprocess (Service triton's grpc),
# Triton's gRPC is on the pod's loopback (no port of the pod).
IN_POD_SERVICE_PORTS = {
    **{k: v for k, v in SERVICE_PORTS.items() if k != "preprocess"},
    "triton": {"grpc": 8091},
}
IN_POD_CONTAINER_PORTS = {
    **{k: v for k, v in CONTAINER_PORTS.items() if k[0] != "preprocess"},
    ("triton", "triton"): {"http": 8000, "metrics": 8002},
    ("triton", "preprocess"): {"grpc": 8091, "prep-metrics": 9181},
}
# in-process: no preprocess at all; Triton as in the base.
IN_PROCESS_SERVICE_PORTS = {k: v for k, v in SERVICE_PORTS.items() if k != "preprocess"}
IN_PROCESS_CONTAINER_PORTS = {k: v for k, v in CONTAINER_PORTS.items() if k[0] != "preprocess"}
# components/mtls (in everything): a plaintext health-only port beside each mTLS gRPC port.
MTLS_CONTAINER_PORTS = {
    **IN_POD_CONTAINER_PORTS,
    ("middleman", "middleman"): {**CONTAINER_PORTS[("middleman", "middleman")], "health": 8190},
    ("batcher", "batcher"): {**CONTAINER_PORTS[("batcher", "batcher")], "health": 8192},
    ("eds", "eds"): {**CONTAINER_PORTS[("eds", "eds")], "health": 18001},
    ("triton", "preprocess"): {**IN_POD_CONTAINER_PORTS[("triton", "preprocess")],
                               "prep-health": 8191},
}  # fmt: skip
PORTS_BY_TARGET = {
    **{f"overlays/{o}": (IN_POD_SERVICE_PORTS, IN_POD_CONTAINER_PORTS) for o in OVERLAYS},
    "everything": (IN_POD_SERVICE_PORTS, MTLS_CONTAINER_PORTS),
    "everything/remote": (SERVICE_PORTS, CONTAINER_PORTS),
    "everything/in-process": (IN_PROCESS_SERVICE_PORTS, IN_PROCESS_CONTAINER_PORTS),
    # components/through-envoy moves no port: each placement's.
    "everything/through-envoy": (IN_POD_SERVICE_PORTS, IN_POD_CONTAINER_PORTS),
    "everything/remote/through-envoy": (SERVICE_PORTS, CONTAINER_PORTS),
    "everything/in-process/through-envoy": (IN_PROCESS_SERVICE_PORTS, IN_PROCESS_CONTAINER_PORTS),
}


@pytest.mark.parametrize("target", PORTS_BY_TARGET)
def test_names_and_ports_are_the_contracts(target: str) -> None:
    objects = render(target)
    service_ports, container_ports = PORTS_BY_TARGET[target]
    services = {o["metadata"]["name"] for o in objects if o["kind"] == "Service"}
    assert services & (set(SERVICE_PORTS) | {"preprocess"}) == set(service_ports), target
    for name, ports in service_ports.items():
        service = find(objects, "Service", name)
        assert service["spec"]["type"] == "ClusterIP"
        assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == ports, name
        for port in service["spec"]["ports"]:
            assert port["targetPort"] == port["name"], f"{name}: target the container port by name"
    pipeline = {name for name, _ in CONTAINER_PORTS}
    deployments = {o["metadata"]["name"] for o in objects if o["kind"] == "Deployment"}
    assert deployments & pipeline == {name for name, _ in container_ports}, target
    for (name, container_name), ports in container_ports.items():
        deployment = find(objects, "Deployment", name)
        [container] = [
            c
            for c in deployment["spec"]["template"]["spec"]["containers"]
            if c["name"] == container_name
        ]
        assert {p["name"]: p["containerPort"] for p in container["ports"]} == ports, name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_the_contracts(overlay: str) -> None:
    """Every inferline image is one CONTRACT.md names (`make deploy` rewrites exactly those)."""
    for container in containers(render(f"overlays/{overlay}")):
        image = container.image.rsplit(":", 1)[0]
        if image.startswith("inferline/"):
            assert image in CONTRACT_IMAGES, f"{container.where}: {image} is not in the contract"
        if container.name == "triton":
            assert container.image == "nvcr.io/nvidia/tritonserver:24.10-py3"


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
    assert main["image"].startswith("inferline/preprocess-gpu:")
    assert {"name": "INFERLINE_PREPROCESS_BACKEND", "value": "dali-gpu"} in main["env"]


def test_cpu_overlay_holds_nothing_of_gpus() -> None:
    objects = render("overlays/cpu")
    text = str([template for _, template in pod_specs(objects)])
    for needle in ("nvidia.com/gpu", "preflight", "preprocess-gpu", "dali-gpu"):
        assert needle not in text, f"the cpu overlay mentions {needle}"
    assert not [o for o in objects if "dcgm" in o["metadata"]["name"]], "no DCGM exporter"


def test_opt_in_components_are_not_in_the_overlays() -> None:
    """gpu-sharing (a cluster-wide device plugin setting), the runtime class and the Operator's
    custom resources (which fail without its CRDs) are opt-in."""
    for overlay in OVERLAYS:
        objects = render(f"overlays/{overlay}")
        assert not [o for o in objects if o["apiVersion"].startswith(OPERATOR_GROUP)], overlay
        assert not [o for o in objects if o["metadata"].get("namespace") == "gpu-operator"]
        assert "runtimeClassName" not in str(objects)


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


@pytest.mark.parametrize("target", TARGETS)
def test_no_host_name_carries_the_namespace_or_the_cluster_domain(target: str) -> None:
    """Services are dialled by their short names (the pod's DNS search path finds them in its own
    namespace), so neither the namespace nor the cluster's domain (cluster.local by default) is
    written into a host name; only a Certificate lists the long names its clients may use."""
    for obj in render(target):
        if obj["kind"] == "Certificate":
            continue
        text = yaml.safe_dump(obj)
        where = f"{obj['kind']} {obj['metadata']['name']}"
        assert ".svc" not in text and "cluster.local" not in text, where


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


def test_the_edge_exposes_the_public_listener_only() -> None:
    """components/edge: a LoadBalancer with Envoy's public port and none of its hop listeners."""
    objects = render("components/edge")
    public = find(objects, "Service", "envoy-public")["spec"]
    envoy = find(objects, "Service", "envoy")["spec"]
    assert public["type"] == "LoadBalancer" and envoy["type"] == "ClusterIP"
    assert public["selector"] == envoy["selector"]
    [port] = public["ports"]
    [first] = [p for p in envoy["ports"] if p["port"] == 8080]
    assert port == first  # the public listener, and only it
    container = find(objects, "Deployment", "envoy")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "grpc", "containerPort": 8080, "protocol": "TCP"} in container["ports"]


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
