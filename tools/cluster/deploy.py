"""``deploy``: the render applied server-side, once no other adapter serves its APIService, and
Grafana's admin password."""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from tools.cluster import kube, kustomize

# Server-side apply under one field manager. --force-conflicts: the manifests win over a field
# someone changed by hand since (kubectl edit, patch or scale, another tool), as a plain
# `kubectl apply` would, instead of failing the deploy on the conflict.
FIELD_MANAGER = "inferline-deploy"
APPLY = ("apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}")
GRAFANA_ADMIN = "grafana-admin"


def deploy(
    overlay: str, registry: str, tag: str, dry_run: bool, namespace: str = kube.NAMESPACE
) -> None:
    manifests = kustomize.render(overlay, registry, tag, namespace)
    if dry_run:
        sys.stdout.write(manifests)
        return
    objects = [o for o in yaml.safe_load_all(manifests) if o]
    refuse_taken_apis(objects)
    kube.step(f"applying overlay {overlay!r} in namespace {namespace} ({len(objects)} objects)")
    sys.stdout.write(kube.kubectl(*APPLY, "-f", "-", input_text=manifests))
    if any(o["kind"] == "Deployment" and o["metadata"]["name"] == "grafana" for o in objects):
        kube.step(ensure_grafana_admin(namespace))
    kube.step("applied: `make verify-cluster` proves it works")


def refuse_taken_apis(objects: Sequence[Mapping[str, Any]]) -> None:
    """ClusterError when an APIService the overlay registers (prometheus-adapter's
    custom.metrics.k8s.io: one per cluster) is already served by another Service: applying it
    would take the API from that adapter and break whatever scales on it."""
    for obj in objects:
        if obj["kind"] != "APIService":
            continue
        name, ours = obj["metadata"]["name"], obj["spec"]["service"]
        found = kube.kubectl("get", "apiservice", name, "--ignore-not-found", "-o", "json")
        if not found.strip():
            continue
        theirs = json.loads(found)["spec"].get("service") or {}
        if (theirs.get("namespace"), theirs.get("name")) != (ours["namespace"], ours["name"]):
            raise kube.ClusterError(
                f"APIService {name} is already served by "
                f"{theirs.get('namespace')}/{theirs.get('name')} (another prometheus-adapter?): "
                "deploy an overlay without components/prometheus-adapter and add its "
                "config.yaml rules to that adapter (k8s/README.md, Autoscaling)"
            )


def ensure_grafana_admin(namespace: str = kube.NAMESPACE) -> str:
    """Secret grafana-admin, Grafana's admin password: generated once, kept after (a password
    of your own, put there first, is kept too). What was done, in a line."""
    found = kube.kubectl("-n", namespace, "get", "secret", GRAFANA_ADMIN, "--ignore-not-found",
                         "-o", "name")  # fmt: skip
    read = (
        f"kubectl -n {namespace} get secret {GRAFANA_ADMIN} -o jsonpath='{{.data.password}}' "
        "| base64 -d"
    )
    if found.strip():
        return f"Grafana's admin password: Secret {GRAFANA_ADMIN}, kept (read it: {read})"
    password = secrets.token_urlsafe(24)
    kube.kubectl("-n", namespace, "create", "secret", "generic", GRAFANA_ADMIN,
                 f"--from-literal=password={password}")  # fmt: skip
    return f"Grafana's admin password: generated into Secret {GRAFANA_ADMIN} (read it: {read})"
