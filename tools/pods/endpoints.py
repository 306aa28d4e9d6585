"""The EndpointSlice controller, which the runner plays because no API server runs here. Pure but
for :func:`write_atomically`.

:func:`endpoint_slice` is the slice the controller would write for a Service and its pods;
:func:`watched_endpoints` turns the slices of the Services eds watches into their endpoints
with eds's own mapping (:func:`eds.sources.endpointslice.endpoints`); :func:`overrides` points
eds's container at the runner's endpoints file instead of the API server.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from eds.cache import Endpoint
from eds.sources import endpointslice
from tools.pods.manifests import Manifests, selects
from tools.pods.spec import Container, Pod

# eds, which would watch the API server's EndpointSlices, reads the runner's instead.
EDS_SOURCE = "INFERLINE_EDS_SOURCE"
ENDPOINTS_MOUNT = "/var/run/inferline-pods"


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` in one rename, readable by the containers' users."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    Path(tmp).chmod(mode)
    Path(tmp).replace(path)


def target_port(pod: Pod, target: object) -> int | None:
    """A Service's targetPort on ``pod``: a number, or the first container port of that name."""
    if isinstance(target, int) or str(target).isdigit():
        return int(str(target))
    return next((c.ports[str(target)] for c in pod.containers if str(target) in c.ports), None)


def endpoint_slice(
    service: Mapping[str, Any], pods: Iterable[tuple[Pod, str, str]]
) -> dict[str, Any]:
    """The EndpointSlice the controller would write for ``service`` and its pods, each given as
    (pod, IP, state: ready, starting or terminating)."""
    name = service["metadata"]["name"]
    members = list(pods)
    ports = []
    for port in service["spec"].get("ports") or []:
        target = port.get("targetPort", port["port"])
        number = next((n for p, _, _ in members if (n := target_port(p, target))), None)
        if number is not None:
            ports.append({"name": port.get("name", ""), "port": number, "protocol": "TCP"})
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "addressType": "IPv4",
        "metadata": {"name": f"{name}-pods", "labels": {endpointslice.SERVICE_LABEL: name}},
        "ports": ports,
        "endpoints": [
            {
                "addresses": [ip],
                "conditions": {
                    "ready": state == "ready",
                    "serving": state in ("ready", "terminating"),
                    "terminating": state == "terminating",
                },
                "targetRef": {"kind": "Pod", "name": pod.name, "uid": pod.uid},
            }
            for pod, ip, state in members
        ],
    }


def eds_container(manifests: Manifests) -> tuple[str, Mapping[str, Any]] | None:
    """(Deployment, container spec) of eds: the container whose env names its source."""
    for name, deployment in manifests.deployments().items():
        for spec in deployment["spec"]["template"]["spec"]["containers"]:
            if any(e.get("name") == EDS_SOURCE for e in spec.get("env") or []):
                return name, spec
    return None


def watched_endpoints(
    manifests: Manifests, eds: Mapping[str, Any], members: Sequence[tuple[Pod, str, str]]
) -> dict[str, tuple[Endpoint, ...]]:
    """The endpoints of each Service eds's container (``eds``) watches, from the slice of the
    pods, given as for :func:`endpoint_slice`, that its selector chooses."""
    env = {str(e["name"]): str(e.get("value", "")) for e in eds.get("env") or []}
    watched = [s.strip() for s in env.get("INFERLINE_EDS_SERVICES", "").split(",") if s.strip()]
    port_name = env.get("INFERLINE_EDS_PORT_NAME", "grpc")
    services = manifests.services()
    clusters: dict[str, tuple[Endpoint, ...]] = {}
    for service in watched:
        if service not in services:
            clusters[service] = ()
            continue
        selector = services[service]["spec"].get("selector") or {}
        chosen = [m for m in members if selects(selector, m[0].labels)]
        if not chosen:
            clusters[service] = ()
            continue
        weights = {p.uid: endpointslice.parse_weight(p.weight, p.name) for p, _, _ in chosen}
        slice_ = endpoint_slice(services[service], chosen)
        clusters[service] = endpointslice.endpoints([slice_], port_name, weights)
    return clusters


def overrides(
    manifests: Manifests, pod: Pod, container: Container, endpoints_file: Path
) -> tuple[dict[str, str], list[str]]:
    """What the runner changes (environment, ``podman create`` arguments): eds reads the
    runner's ``endpoints_file``, not the API server."""
    found = eds_container(manifests)
    if found is None or found[0] != pod.deployment or found[1]["name"] != container.name:
        return {}, []
    env = {
        EDS_SOURCE: "file",
        "INFERLINE_EDS_ENDPOINTS_FILE": f"{ENDPOINTS_MOUNT}/{endpoints_file.name}",
    }
    folder = endpoints_file.parent
    return env, [f"--mount=type=bind,source={folder},destination={ENDPOINTS_MOUNT},ro=true"]
