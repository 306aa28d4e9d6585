"""The manifests in another namespace than ``inferline`` (k8s/README.md, Another namespace).

An overlay of one's own sets ``namespace: team-a``. kustomize's namespace transformer moves every
namespaced object below it (and renames every Namespace object to it), so the components that put
objects in other namespaces (:data:`OUTSIDE`) are listed in an overlay above that one, and take
the pipeline's namespace from the objects below them; both overlays are laid out so
(``pipeline/`` below, their per-cluster components above). Each render here is that layout, with
``team-a``, rendered by plain ``kubectl kustomize``; in it:

* every namespaced object is in team-a, but those deliberately elsewhere (:data:`ELSEWHERE`, each
  with its reason), and the only Namespace objects are team-a (still ``restricted``) and the DCGM
  exporter's own;
* nothing names ``inferline`` where a namespace goes: no binding subject, Certificate DNS name,
  APIService, network policy's namespace selector, Prometheus discovery (in the ConfigMaps'
  files too), ``namespace`` field, environment variable or URL.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from k8s.tests.manifests import (
    COMPONENT_NEEDS,
    EVERYTHING,
    K8S,
    NAMESPACE,
    OVERLAYS,
    documents,
    kustomize,
    target_components,
)

OTHER = "team-a"
# Components that put objects in another namespace than the pipeline's, or patch one that does:
# in an overlay of one's own, above the one that sets `namespace:`.
OUTSIDE = ("gpu-sharing", "dcgm-exporter", "nvidia-runtime-class", "gke", "prometheus-adapter")
# The namespaces objects stay in, whatever the pipeline's: why each.
ELSEWHERE = {
    "inferline-dcgm": "the DCGM exporter needs root and a hostPath: a `privileged` namespace of "
    "its own, not the pipeline's `restricted` one",
    "kube-system": "prometheus-adapter's RoleBinding to the API server's client CA, a Role there",
    "gpu-operator": "the device plugin's time-slicing configuration, where the GPU Operator "
    "reads it",
}
# The components whose namespace handling is checked alone (with what they need), beside both
# overlays and everything.
COMPONENTS = ("monitoring", "dcgm-exporter", "prometheus-adapter", "tls", "mtls", "gpu-sharing")
RENDERS = (*(f"overlays/{o}" for o in OVERLAYS), *(f"components/{c}" for c in COMPONENTS),
           "everything")  # fmt: skip
# A namespace in a string: a Service's DNS name, a flag, a `namespace` key of an embedded file.
NAMED_IN_TEXT = re.compile(
    rf"(?<![\w-]){NAMESPACE}\.svc\b|\.{NAMESPACE}\.svc\b|--namespace[= ]{NAMESPACE}(?![\w-])"
    rf"|\bnamespace\s*[=:]\s*[\"']?{NAMESPACE}(?![\w-])"
)


def relative(path: Path, folder: Path) -> str:
    return os.path.relpath(path, folder)


def layers(target: str) -> tuple[Path, tuple[str, ...], tuple[str, ...]]:
    """What the overlay that sets `namespace:` lists (a resource folder and components), and the
    components above it."""
    if target.endswith("/pipeline"):
        return K8S / target, (), ()
    if target.startswith("overlays/"):
        outer = yaml.safe_load((K8S / target / "kustomization.yaml").read_text("utf-8"))
        return K8S / target / "pipeline", (), tuple(Path(c).name for c in outer["components"])
    names = EVERYTHING if target == "everything" else target_components(target)
    inside = tuple(n for n in names if n not in OUTSIDE)
    return K8S / "base", inside, tuple(n for n in names if n in OUTSIDE)


def write(folder: Path, kustomization: dict[str, Any]) -> None:
    header = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    (folder / "kustomization.yaml").write_text(yaml.safe_dump({**header, **kustomization}), "utf-8")


@functools.cache
def render_text(target: str, layered: bool = True) -> str:
    """``target`` with ``namespace: team-a`` in an overlay on top of it; ``layered``: the
    components of :data:`OUTSIDE` in an overlay above that one (else none may be there)."""
    resource, inside, outside = layers(target)
    assert layered or not outside, f"{target} has components above its pipeline: {outside}"
    with tempfile.TemporaryDirectory(prefix="inferline-namespace-") as tmp:
        top = Path(tmp)
        pipeline = top / "pipeline"
        pipeline.mkdir()
        write(pipeline, {
            "namespace": OTHER,
            "resources": [relative(resource, pipeline)],
            "components": [relative(K8S / "components" / name, pipeline) for name in inside],
        })  # fmt: skip
        if not outside:
            return kustomize(pipeline)
        write(top, {
            "resources": ["pipeline"],
            "components": [relative(K8S / "components" / name, top) for name in outside],
        })  # fmt: skip
        return kustomize(top)


def render(target: str, layered: bool = True) -> list[dict[str, Any]]:
    return documents(render_text(target, layered))


def where(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}"


def walk(node: Any, path: str = "") -> Iterator[tuple[str, str, Any]]:
    """(path, key, value) of every field under ``node``; a string that holds YAML (a ConfigMap's
    file) is walked too."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield path, str(key), value
            yield from walk(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield path, f"[{i}]", value
            yield from walk(value, f"{path}[{i}]")
    elif isinstance(node, str) and "\n" in node:
        try:
            embedded = yaml.safe_load(node)
        except yaml.YAMLError:
            return
        if isinstance(embedded, dict | list):
            yield from walk(embedded, f"{path}<file>")


def old_namespace_named(obj: dict[str, Any]) -> Iterator[str]:
    """Where ``obj`` names the namespace ``inferline``."""
    for path, key, value in walk(obj):
        at = f"{where(obj)} {path}.{key}"
        if key == "namespace" and value == NAMESPACE:
            yield at
        if key in ("names", "matchNames") and isinstance(value, list) and NAMESPACE in value:
            yield f"{at}: {value}"
        if key == "kubernetes.io/metadata.name" and value == NAMESPACE:
            yield at
        if isinstance(value, str) and NAMED_IN_TEXT.search(value):
            yield f"{at}: {NAMED_IN_TEXT.search(value)}"
    for path, key, value in walk(obj):  # env: FOO_NAMESPACE=inferline
        if key == "env" and isinstance(value, list):
            for var in value:
                if "NAMESPACE" in var.get("name", "") and var.get("value") == NAMESPACE:
                    yield f"{where(obj)} {path}.env {var['name']}"


def test_each_overlay_is_its_pipeline_and_the_per_cluster_components_above_it() -> None:
    """What an overlay of one's own in another namespace rebuilds: the overlay's pipeline/ under
    `namespace:`, and the overlay's own components above it, nothing else."""
    for overlay in OVERLAYS:
        outer = yaml.safe_load((K8S / "overlays" / overlay / "kustomization.yaml").read_text())
        assert outer["resources"] == ["pipeline"], overlay
        assert set(outer) == {"apiVersion", "kind", "resources", "components"}, overlay
        above = [Path(c).name for c in outer["components"]]
        assert above and set(above) <= set(OUTSIDE), above
        inner = yaml.safe_load(
            (K8S / "overlays" / overlay / "pipeline" / "kustomization.yaml").read_text()
        )
        assert "namespace" not in inner  # the base's, `inferline`: an overlay's sets another
        assert not {Path(c).name for c in inner["components"]} & set(OUTSIDE), overlay
    assert set(OUTSIDE) <= set(COMPONENT_NEEDS)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_an_overlays_pipeline_takes_a_namespace_on_top_alone(overlay: str) -> None:
    """`namespace: team-a` on an overlay's pipeline/: every namespaced object in team-a, the
    pipeline's Namespace renamed to it."""
    objects = render(f"overlays/{overlay}/pipeline", layered=False)
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "Namespace"} == {OTHER}
    for obj in objects:
        assert obj["metadata"].get("namespace", OTHER) == OTHER, where(obj)
    assert not [at for obj in objects for at in old_namespace_named(obj)]


@pytest.mark.parametrize("target", RENDERS)
def test_every_object_is_in_the_namespace_or_deliberately_elsewhere(target: str) -> None:
    objects = render(target)
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if namespace is not None and namespace != OTHER:
            assert namespace in ELSEWHERE, f"{where(obj)}: neither {OTHER} nor a reason"
    spaces = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Namespace"}
    assert set(spaces) - {"inferline-dcgm"} == {OTHER}, sorted(spaces)
    labels = spaces[OTHER]["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("target", RENDERS)
def test_nothing_names_inferline_as_a_namespace(target: str) -> None:
    named = [at for obj in render(target) for at in old_namespace_named(obj)]
    assert not named, "\n".join(named)


@pytest.mark.parametrize("target", RENDERS)
def test_bindings_certificates_apis_and_selectors_name_where_the_objects_are(target: str) -> None:
    objects = render(target)
    accounts = {o["metadata"]["name"]: o["metadata"]["namespace"] for o in objects
                if o["kind"] == "ServiceAccount"}  # fmt: skip
    services = {o["metadata"]["name"]: o["metadata"]["namespace"] for o in objects
                if o["kind"] == "Service"}  # fmt: skip
    for obj in objects:
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            for subject in obj["subjects"]:
                if subject["kind"] == "ServiceAccount":
                    assert subject["namespace"] == accounts[subject["name"]] == OTHER, where(obj)
        elif obj["kind"] == "Certificate":
            for name in obj["spec"].get("dnsNames", []):
                labels = name.split(".")
                if "svc" in labels:  # <service>.<namespace>.svc[.cluster.local]
                    assert labels[1] == services[labels[0]] == OTHER, f"{where(obj)}: {name}"
        elif obj["kind"] == "APIService":
            service = obj["spec"]["service"]
            assert service["namespace"] == services[service["name"]] == OTHER, where(obj)
        elif obj["kind"] == "NetworkPolicy":
            for _, key, value in walk(obj["spec"]):
                if key == "kubernetes.io/metadata.name":  # a namespaceSelector's
                    assert value in (OTHER, *ELSEWHERE), f"{where(obj)}: {value}"


def test_the_namespaces_elsewhere_are_all_used() -> None:
    """ELSEWHERE holds no namespace that nothing is in (everything has every component)."""
    used = {o["metadata"].get("namespace") for o in render("everything")} - {None, OTHER}
    assert used == set(ELSEWHERE)
