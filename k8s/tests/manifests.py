"""The Kubernetes manifests as the cluster would get them: rendered by ``kubectl kustomize``.

Every k8s test reads the rendered output, never the source files: what a kustomization,
a component's patch or a generator does is what is checked.

* :func:`render` — an overlay (``overlays/gpu``), or a component on the base through a throwaway
  kustomization (``components/preflight``: the base, the components it needs, then it);
  ``everything`` is the base with every component, the opt-in ones too, and the default
  placement (in-pod) last; ``everything/remote`` the same without a placement component (the
  base's remote placement), ``everything/in-process`` with components/in-process instead; each
  of them followed by ``/through-envoy`` is the same with components/through-envoy in place of
  components/mtls (which includes it): the batcher hop through Envoy without mTLS;
* :func:`pod_specs`, :func:`containers` — every pod template and every container in it.

kubectl (1.32, kustomize v5.5) is required: without it the tests skip, saying so, unless
``INFERLINE_REQUIRE_TOOLS=1`` (CI), where they fail.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import os
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from inferline_envoy import config as envoy_config
from inferline_envoy import render as envoy_render
from inferline_envoy.params import KUBERNETES, EnvoyParams
from inferline_envoy.sds import render_sds
from inferline_envoy.template import dump
from inferline_testing import tools
from inferline_testing.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
OVERLAYS = ("gpu", "cpu")
NAMESPACE = "inferline"
# The Kubernetes version every rendered object is validated against (kubernetes-validate, strict):
# the kubectl this repository uses is 1.32, and every API the manifests use is GA there.
KUBERNETES_VERSION = "1.32.0"

# What a component needs before it in an overlay (k8s/README.md says the same).
COMPONENT_NEEDS: dict[str, tuple[str, ...]] = {
    "gpu": (),
    "gpu-sharing": ("gpu",),
    "gpu-mig": ("gpu", "preflight"),
    "preflight": ("gpu",),
    "nvidia-runtime-class": ("gpu", "monitoring", "dcgm-exporter"),
    "monitoring": (),
    "monitoring-operator": (),
    "dcgm-exporter": ("monitoring",),
    "autoscaling": ("monitoring",),
    "prometheus-adapter": ("monitoring", "autoscaling"),
    "network-policies": (),
    "pod-disruption-budgets": (),
    "tls": (),
    "auth": ("tls",),
    "edge": (),
    # GKE's accelerator label instead of GFD's: changes what gpu (and dcgm-exporter) schedule on.
    "gke": ("gpu", "monitoring", "dcgm-exporter"),
    # The placements: one per overlay, listed last (they remove the base's preprocess pool and
    # what the components before them add for it); alone on the base, they need nothing.
    "in-pod": (),
    "in-process": (),
    # The batcher hop through Envoy: in any placement (after it: its policy patches follow the
    # placement's). components/mtls includes it.
    "through-envoy": (),
    # mTLS behind Envoy: to the in-pod placement's GPU pods (their preprocess), so after it.
    "mtls": ("in-pod",),
    # The models from an object store or a volume (one or the other: both replace the models
    # image's copy), and TensorRT's engines on a volume. After preflight where both are listed.
    "model-store": (),
    "model-store-pvc": (),
    "tensorrt-cache": (),
    # Spans to an OpenTelemetry Collector, on to your trace backend; Grafana's Tempo data source
    # with components/monitoring, the collector's policies with components/network-policies.
    "tracing": (),
}
# Where images are decoded: a component each; without one, the base's remote placement (a
# preprocess pool). in-pod is the overlays' default.
PLACEMENTS = ("in-pod", "in-process")
DEFAULT_PLACEMENT = "in-pod"
# Every component but the placements (and mtls, which needs in-pod), in an order that satisfies
# COMPONENT_NEEDS; the `everything` render adds the default placement and mtls last.
ALL_BUT_PLACEMENTS = (
    "gpu", "gpu-sharing", "preflight", "gpu-mig", "monitoring", "dcgm-exporter",
    "nvidia-runtime-class", "gke", "autoscaling", "prometheus-adapter", "network-policies",
    "pod-disruption-budgets", "monitoring-operator", "tls", "auth", "edge", "model-store",
    "tensorrt-cache", "tracing",
)  # fmt: skip
AFTER_PLACEMENT = ("mtls",)  # components that change what the default placement made
# Components another one includes (its kustomization's `components:`), so in `everything` through
# it: included -> includer.
INCLUDED = {"through-envoy": "mtls"}
# Components that do another way what one in `everything` does: rendered on their own only.
ALTERNATIVES = ("model-store-pvc",)  # the models on a volume, not in an object store
EVERYTHING = (*ALL_BUT_PLACEMENTS, DEFAULT_PLACEMENT, *AFTER_PLACEMENT)
# The everything render in each placement: target name -> its components.
EVERYTHING_BY_PLACEMENT = {
    "everything": EVERYTHING,
    "everything/remote": ALL_BUT_PLACEMENTS,
    "everything/in-process": (*ALL_BUT_PLACEMENTS, "in-process"),
}
# The same with the batcher hop through Envoy and no mTLS: components/through-envoy last (in place
# of components/mtls, which includes it), in each placement.
EVERYTHING_THROUGH_ENVOY = {
    f"{target}/through-envoy": (*(n for n in names if n != INCLUDED["through-envoy"]),
                                "through-envoy")
    for target, names in EVERYTHING_BY_PLACEMENT.items()
}  # fmt: skip
TARGETS = (
    *(f"overlays/{name}" for name in OVERLAYS),
    *(f"components/{name}" for name in COMPONENT_NEEDS),
    *EVERYTHING_BY_PLACEMENT,
    *EVERYTHING_THROUGH_ENVOY,
)
WORKLOAD_KINDS = ("Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job")
# What middleman dials for the batchers: proxyless by default, through Envoy with
# components/through-envoy (or components/mtls, which includes it).
PROXYLESS_URL = "xds:///batcher"  # gRPC's xDS client, the batcher cluster eds serves
ENVOY_URL = "envoy:8082"  # Envoy's batcher listener


def kubectl() -> str:
    return tools.tool("kubectl", "install kubectl 1.32 (it carries kustomize v5.5)")


def kustomize(folder: Path) -> str:
    """Plain ``kubectl kustomize``, no flags: as `make deploy`, ``kubectl apply -k``, Argo CD and
    Flux render it (the default load restrictor: no file outside the kustomization's root)."""
    command = [kubectl(), "kustomize", str(folder)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stderr}"
    return result.stdout


def component_kustomization(names: tuple[str, ...], folder: Path) -> dict[str, Any]:
    """A kustomization in ``folder``: the base, then the components ``names`` in order."""

    def rel(path: Path) -> str:
        return os.path.relpath(path, folder)

    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [rel(K8S / "base")],
        "components": [rel(K8S / "components" / name) for name in names],
    }


def target_components(target: str) -> tuple[str, ...]:
    if target in EVERYTHING_BY_PLACEMENT:
        return EVERYTHING_BY_PLACEMENT[target]
    if target in EVERYTHING_THROUGH_ENVOY:
        return EVERYTHING_THROUGH_ENVOY[target]
    name = target.removeprefix("components/")
    return (*COMPONENT_NEEDS[name], name)


@functools.cache
def render_text(target: str) -> str:
    """The rendered YAML of ``target``: overlays/<name>, components/<name> or everything[/…]."""
    if target.startswith("overlays/"):
        return kustomize(K8S / target)
    with tempfile.TemporaryDirectory(prefix="inferline-kustomize-") as tmp:
        folder = Path(tmp)
        kustomization = component_kustomization(target_components(target), folder)
        (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization), "utf-8")
        return kustomize(folder)


@functools.cache
def _parsed(text: str) -> tuple[dict[str, Any], ...]:
    return tuple(doc for doc in yaml.load_all(text, Loader=yaml.CSafeLoader) if doc)


def documents(text: str) -> list[dict[str, Any]]:
    """The objects of a rendered ``text``, parsed once (libyaml's parser: Python's took most
    of these tests' time), each call fresh copies: a test may change them."""
    return copy.deepcopy(list(_parsed(text)))


def render(target: str) -> list[dict[str, Any]]:
    """The rendered objects of ``target`` (fresh copies: a test may change them)."""
    return documents(render_text(target))


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The one object of ``kind`` whose name is ``name`` (or, for a generated ConfigMap, starts
    with ``name-`` and a content hash)."""
    found = [
        o
        for o in objects
        if o["kind"] == kind
        and (
            o["metadata"]["name"] == name
            or (kind == "ConfigMap" and o["metadata"]["name"].rsplit("-", 1)[0] == name)
        )
    ]
    assert len(found) == 1, f"expected one {kind} {name}, found {[o['metadata'] for o in found]}"
    return found[0]


@dataclass(frozen=True)
class Container:
    workload: str  # "Deployment inferline/triton"
    kind: str  # containers | initContainers | ephemeralContainers
    spec: dict[str, Any]
    pod: dict[str, Any]  # the pod spec it belongs to

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def where(self) -> str:
        return f"{self.workload} {self.kind}/{self.name}"

    @property
    def image(self) -> str:
        return str(self.spec.get("image", ""))

    def port(self, name: str) -> int:
        for port in self.spec.get("ports") or []:
            if port.get("name") == name:
                return int(port["containerPort"])
        raise AssertionError(f"{self.where} has no port named {name!r}")

    def env(self) -> dict[str, Any]:
        """Its environment: name → value (a string) or valueFrom (a mapping)."""
        return {e["name"]: e.get("value", e.get("valueFrom")) for e in self.spec.get("env") or []}

    def probe_port(self) -> int:
        """Where an inferline service's gRPC probes go: its plaintext health-only port where it
        opens one (INFERLINE_<SERVICE>_HEALTH_PORT: its gRPC port is mTLS, components/mtls),
        declared as a port of the container; else its gRPC port."""
        health = [v for k, v in self.env().items() if k.endswith("_HEALTH_PORT")]
        if not health:
            return self.port("grpc")
        [port] = health
        declared = {int(p["containerPort"]) for p in self.spec.get("ports") or []}
        assert int(port) in declared, f"{self.where}: health port {port} is no container port"
        return int(port)


def workload_name(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}"


def pod_template(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The pod template of a workload (its metadata and spec), None for other objects."""
    if obj["kind"] == "Pod":
        return {"metadata": obj["metadata"], "spec": obj["spec"]}
    if obj["kind"] == "CronJob":
        template: dict[str, Any] = obj["spec"]["jobTemplate"]["spec"]["template"]
        return template
    if obj["kind"] in WORKLOAD_KINDS:
        template = obj["spec"]["template"]
        return template
    return None


def pod_specs(objects: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    """(workload object, pod template) for every object that makes pods."""
    for obj in objects:
        template = pod_template(obj)
        if template is not None:
            yield obj, template


def containers(objects: list[dict[str, Any]]) -> Iterator[Container]:
    """Every container of every pod template: app, init and ephemeral containers."""
    for obj, template in pod_specs(objects):
        spec = template["spec"]
        for kind in ("initContainers", "containers", "ephemeralContainers"):
            for container in spec.get(kind) or []:
                yield Container(workload_name(obj), kind, container, spec)


@dataclass(frozen=True)
class Bootstrap:
    """Envoy's bootstrap as its pod renders it (the init container's flags, through the renderer
    in the Envoy image), and the SDS files beside it where the flags ask for them (by name)."""

    params: EnvoyParams
    config: dict[str, Any]
    sds: dict[str, dict[str, Any]]

    def text(self) -> str:
        return dump(self.config)


def envoy_bootstrap(objects: list[dict[str, Any]]) -> Bootstrap:
    """The bootstrap Envoy's Deployment in ``objects`` renders when its pod starts."""
    pod = find(objects, "Deployment", "envoy")["spec"]["template"]["spec"]
    [init] = [c for c in pod.get("initContainers", []) if c["name"] == "bootstrap"]
    assert init["command"] == ["python", "-m", "inferline_envoy.config"], init["command"]
    params, _ = envoy_config.parse_args(init["args"])
    return Bootstrap(params, envoy_render.render(params), render_sds(params))


def local_bootstrap(text: str, eds_port: int) -> tuple[dict[str, Any], EnvoyParams]:
    """The rendered bootstrap with local addresses: free listener and admin ports on
    127.0.0.1, the xDS cluster at the local eds. Nothing else changes."""
    config = yaml.safe_load(text)
    admin = config["admin"]["address"]["socket_address"]
    admin_port = free_port()
    hops: list[tuple[str, int]] = []
    probe_port = 0
    for listener in config["static_resources"]["listeners"]:
        address = listener["address"]["socket_address"]
        address.update(address="127.0.0.1", port_value=free_port())
        if listener["name"] == "probe":
            probe_port = address["port_value"]
        else:
            hops.append((listener["name"], address["port_value"]))
    for cluster in config["static_resources"]["clusters"]:
        if cluster["name"] not in ("xds", "admin"):
            continue
        endpoint = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
        socket = endpoint["address"]["socket_address"]
        if cluster["name"] == "admin":  # the probe listener's way to the admin API
            assert (socket["address"], socket["port_value"]) == (
                admin["address"],
                admin["port_value"],
            )
            socket["port_value"] = admin_port
        else:
            cluster["type"] = "STATIC"
            socket.update(address="127.0.0.1", port_value=eds_port)
    admin["port_value"] = admin_port
    params = dataclasses.replace(
        KUBERNETES, listeners=tuple(hops), admin_port=admin_port,
        probe_port=probe_port, xds_host="127.0.0.1", xds_port=eds_port,
    )  # fmt: skip
    return config, params
