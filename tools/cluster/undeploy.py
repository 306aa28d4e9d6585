"""``undeploy``: delete what deploy applied."""

from __future__ import annotations

import sys

import yaml

from tools.cluster import kube, kustomize


def undeploy(overlay: str, namespace: str = kube.NAMESPACE) -> None:
    """Delete what deploy applied; in another namespace than ``inferline``, all but that
    namespace itself (it may hold more than the pipeline)."""
    manifests = kustomize.render(overlay, "unused.example", "unused", namespace)
    if namespace != kube.NAMESPACE:
        objects = [
            o for o in yaml.safe_load_all(manifests)
            if o and (o["kind"], o["metadata"]["name"]) != ("Namespace", namespace)
        ]  # fmt: skip
        manifests = yaml.safe_dump_all(objects)
        kube.step(
            f"namespace {namespace} is kept: delete it yourself where only inferline was there"
        )
    sys.stdout.write(kube.kubectl("delete", "--ignore-not-found", "-f", "-", input_text=manifests))
