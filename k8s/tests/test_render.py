"""Both overlays and every component render with ``kubectl kustomize``, and every rendered object
validates against the Kubernetes 1.32 schema (kubernetes-validate, strict: an unknown field is an
error, as ``kubectl apply --validate=strict`` makes it).

The Prometheus Operator's custom resources (components/monitoring-operator: PodMonitor,
PrometheusRule) and cert-manager's (components/tls: Certificate, Issuer) have no schema there:
they are skipped by kubernetes-validate, and checked here for the fields their operator needs
instead. Every other kind must have a schema. Every object is labelled and namespaced, selectors
use the name label, no host name carries the namespace or the cluster's domain; names, ports and
images are the contract's (k8s/CONTRACT.md). Where the pods are scheduled: test_scheduling.py.
"""

from __future__ import annotations

import functools
import json
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


@functools.cache
def strict_failure(obj_json: str) -> str | None:
    """Why the object (as JSON) fails Kubernetes' strict schema, or None. Memoized: the same
    object is in many targets, and the library reads its schemas from disk for each call."""
    try:
        kubernetes_validate.validate(json.loads(obj_json), KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"
    except kubernetes_validate.SchemaNotFoundError as exc:
        return f"no schema ({exc.message})"
    return None


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
        if failure := strict_failure(json.dumps(obj, sort_keys=True)):
            failures.append(f"{where}: {failure}")
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


def test_opt_in_components_are_not_in_the_overlays() -> None:
    """gpu-sharing (a cluster-wide device plugin setting), the runtime class and the Operator's
    custom resources (which fail without its CRDs) are opt-in."""
    for overlay in OVERLAYS:
        objects = render(f"overlays/{overlay}")
        assert not [o for o in objects if o["apiVersion"].startswith(OPERATOR_GROUP)], overlay
        assert not [o for o in objects if o["metadata"].get("namespace") == "gpu-operator"]
        assert "runtimeClassName" not in str(objects)


@pytest.mark.parametrize("target", TARGETS)
def test_no_host_name_carries_the_namespace_or_the_cluster_domain(target: str) -> None:
    """Services are dialled by their short names (the pod's DNS search path finds them in its own
    namespace), so neither the namespace nor the cluster's domain (cluster.local by default) is
    written into a host name; only a Certificate lists the long names its clients may use."""
    for obj in render(target):
        if obj["kind"] == "Certificate":
            continue
        text = json.dumps(obj)
        where = f"{obj['kind']} {obj['metadata']['name']}"
        assert ".svc" not in text and "cluster.local" not in text, where


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
