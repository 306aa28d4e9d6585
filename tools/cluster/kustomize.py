"""The deploy-time kustomization under ``build/deploy/<overlay>/`` and its render."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from tools.cluster import kube
from tools.images import IMAGES

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ("gpu", "cpu")
# The pipeline's Deployments in every placement, in the order they are waited for; preprocess
# (a pool of its own only in the remote placement) and the rest (monitoring, the adapter) follow
# when the overlay has them.
DEPLOYMENTS = ("eds", "envoy", "triton", "batcher", "middleman")

KUSTOMIZATION = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}


def overlay_components(overlay: str) -> list[str]:
    """The components ``k8s/overlays/<overlay>`` lists above its ``pipeline/``, as paths from
    ``k8s/``."""
    folder = ROOT / "k8s" / "overlays" / overlay
    made = yaml.safe_load((folder / "kustomization.yaml").read_text("utf-8"))
    extra = set(made) - {*KUSTOMIZATION, "resources", "components"}
    if made.get("resources") != ["pipeline"] or extra:
        raise kube.ClusterError(
            f"k8s/overlays/{overlay}: expected its pipeline/ and components only"
        )
    return [
        (folder / path).resolve().relative_to(ROOT / "k8s").as_posix()
        for path in made.get("components", [])
    ]


def kustomization(
    overlay: str, registry: str, tag: str, namespace: str = kube.NAMESPACE
) -> dict[str, Any]:
    """The deploy-time kustomization: the overlay, with every image from ``registry``; in another
    namespace, its pipeline in that namespace (:func:`pipeline_kustomization`, in ``pipeline/``)
    and the overlay's components above it."""
    if overlay not in OVERLAYS:
        raise kube.ClusterError(f"unknown overlay {overlay!r}: one of {', '.join(OVERLAYS)}")
    if not registry or not tag:
        raise kube.ClusterError(
            "REGISTRY and TAG are needed: where `make images` pushed the images"
        )
    kube.check_namespace(namespace)
    if namespace == kube.NAMESPACE:
        layout: dict[str, Any] = {"resources": [f"../../../k8s/overlays/{overlay}"]}
    else:
        components = [f"../../../k8s/{path}" for path in overlay_components(overlay)]
        layout = {"resources": ["pipeline"], "components": components}
    return {
        **KUSTOMIZATION,
        **layout,
        "images": [  # k8s/CONTRACT.md: inferline/<name> is pushed as <registry>/inferline-<name>
            {
                "name": f"inferline/{image.name}",
                "newName": f"{registry.rstrip('/')}/{image.repository}",
                "newTag": tag,
            }
            for image in IMAGES
        ],
    }


def pipeline_kustomization(overlay: str, namespace: str) -> dict[str, Any]:
    """``build/deploy/<overlay>/pipeline/``: the overlay's pipeline in ``namespace``."""
    return {
        **KUSTOMIZATION,
        "namespace": namespace,
        "resources": [f"../../../../k8s/overlays/{overlay}/pipeline"],
    }


def write_kustomization(
    overlay: str, registry: str, tag: str, namespace: str = kube.NAMESPACE
) -> Path:
    folder = ROOT / "build" / "deploy" / overlay
    made = kustomization(overlay, registry, tag, namespace)
    header = "# Written by `make deploy` (tools/cluster/kustomize.py); regenerated every time.\n"
    pipeline = folder / "pipeline"
    shutil.rmtree(pipeline, ignore_errors=True)
    if made["resources"] == ["pipeline"]:
        pipeline.mkdir(parents=True)
        text = yaml.safe_dump(pipeline_kustomization(overlay, namespace))
        (pipeline / "kustomization.yaml").write_text(header + text, "utf-8")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kustomization.yaml").write_text(header + yaml.safe_dump(made), "utf-8")
    return folder


@contextlib.contextmanager
def render_lock() -> Iterator[None]:
    """One render at a time on this machine (a lock on ``build/deploy``): the folder is the
    overlay's, and a render of other images written between another's write and its read
    (parallel test workers do that) would hand it the wrong images."""
    lock = ROOT / "build" / "deploy" / ".render.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        yield


def render(overlay: str, registry: str, tag: str, namespace: str = kube.NAMESPACE) -> str:
    """What ``make deploy`` applies: ``kubectl kustomize`` of :func:`write_kustomization`,
    under :func:`render_lock`."""
    with render_lock():
        folder = write_kustomization(overlay, registry, tag, namespace)
        return kube.kubectl("kustomize", str(folder))
