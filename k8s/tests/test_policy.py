"""Policy on the rendered manifests: what every container and every pod must be (issue 9, items 3
and 4), checked over every container of both overlays and of the `everything` renders (the base
with every component, opt-in ones too, in each placement), so a container added anywhere is
checked without a test naming it.

Every container (init containers too):
  runAsNonRoot, readOnlyRootFilesystem, allowPrivilegeEscalation: false, capabilities drop ALL
  and add none, not privileged, seccompProfile RuntimeDefault — on the container itself, not
  inherited; cpu and memory requests and limits (requests ≤ limits); a pinned image tag and an
  explicit pull policy; every inferline image's process writes only to an emptyDir (/tmp).
Every long-running container: readiness and liveness probes; the inferline gRPC services' are
  native gRPC probes (grpc.health.v1) on their `grpc` port (on their plaintext health port where
  that port is mTLS: components/mtls); Triton's are its HTTP health
  endpoints with a startup probe that allows 10 minutes for loading models.
Every pod: automountServiceAccountToken false (pod and ServiceAccount) but where API access is
  the pod's job (TOKEN_EXCEPTIONS: eds, and the monitoring pods that must read the API); no host
  namespaces; no hostPath but the DCGM exporter's.
eds (item 3): a Role, not a ClusterRole, in its namespace: get/list/watch endpointslices
  (discovery.k8s.io) and get pods, nothing else; nothing else bound to its ServiceAccount.
Envoy (item 3): the ADS bootstrap, admin on loopback and off the pod's ports, readiness on /ready
  through the probe listener, a preStop drain shorter than the grace period.

The exceptions are listed below, each with its reason; anything not listed fails.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from k8s.tests.manifests import (
    EVERYTHING_BY_PLACEMENT,
    NAMESPACE,
    OVERLAYS,
    Container,
    containers,
    envoy_bootstrap,
    find,
    pod_specs,
    render,
)

POLICY_TARGETS = (*(f"overlays/{o}" for o in OVERLAYS), *EVERYTHING_BY_PLACEMENT)
GRPC_SERVICES = {"middleman", "preprocess", "batcher", "eds"}
# What every policy target renders, at least: a check over an empty render would pass.
PIPELINE = {"envoy", "middleman", "batcher", "triton", "eds"}
STARTUP_S = 600  # Triton's startup probe: 10 minutes to load the models

# (namespace/workload, container) -> {rule: why it does not apply}
EXCEPTIONS: dict[tuple[str, str], dict[str, str]] = {
    ("inferline-dcgm/dcgm-exporter", "dcgm-exporter"): {
        "runAsNonRoot": "the kubelet's pod-resources socket (which pod holds which GPU) is root's; "
        "every capability is still dropped, in a namespace of its own",
        "hostPath": "/var/lib/kubelet/pod-resources, read-only: the --kubernetes pod mapping",
    },
}
# Pods whose job is to talk to the API server: the only ones with a ServiceAccount token.
TOKEN_EXCEPTIONS = {
    f"{NAMESPACE}/eds": "lists and watches EndpointSlices, reads pods (item 3)",
    f"{NAMESPACE}/prometheus": "Kubernetes pod discovery (a Role: pods, read-only)",
    f"{NAMESPACE}/prometheus-adapter": "an aggregated API server: delegated authn/authz",
}
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "*"}


def excepted(container: Container, rule: str) -> bool:
    workload = container.workload.split(" ", 1)[1]
    return rule in EXCEPTIONS.get((workload, container.name), {})


UNITS = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "k": 1e3, "M": 1e6, "G": 1e9}


def quantity(value: str | int | float) -> float:
    """A Kubernetes quantity as a number (cores, bytes)."""
    text = str(value)
    for suffix, factor in UNITS.items():
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def security_violations(container: Container) -> Iterator[str]:
    context = container.spec.get("securityContext") or {}
    if context.get("runAsNonRoot") is not True and not excepted(container, "runAsNonRoot"):
        yield "securityContext.runAsNonRoot is not true"
    if context.get("runAsUser") == 0 and not excepted(container, "runAsNonRoot"):
        yield "runs as uid 0"
    if context.get("readOnlyRootFilesystem") is not True:
        yield "securityContext.readOnlyRootFilesystem is not true"
    if context.get("allowPrivilegeEscalation") is not False:
        yield "securityContext.allowPrivilegeEscalation is not false"
    if context.get("privileged"):
        yield "privileged"
    capabilities = context.get("capabilities") or {}
    if capabilities.get("drop") != ["ALL"]:
        yield "securityContext.capabilities.drop is not [ALL]"
    if capabilities.get("add"):
        yield f"adds capabilities {capabilities['add']}"
    if (context.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        yield "securityContext.seccompProfile.type is not RuntimeDefault"


def resource_violations(container: Container) -> Iterator[str]:
    resources = container.spec.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for name in ("cpu", "memory"):
        if name not in requests:
            yield f"no {name} request"
        if name not in limits:
            yield f"no {name} limit"
        both = name in requests and name in limits
        if both and quantity(requests[name]) > quantity(limits[name]):
            yield f"{name} request {requests[name]} > limit {limits[name]}"


def image_violations(container: Container) -> Iterator[str]:
    image = container.image
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag or tag in ("", "latest"):
        yield f"image {image!r} has no pinned tag"
    if container.spec.get("imagePullPolicy") not in ("IfNotPresent", "Always"):
        yield "no explicit imagePullPolicy"


def scratch_violations(container: Container) -> Iterator[str]:
    """An inferline process writes only to /tmp, an emptyDir (CONTRACT.md); the init containers
    of the models image (Triton's models, middleman's model-cards) write the repository into
    theirs."""
    if not container.image.startswith("inferline/"):
        return
    path = "/repository" if container.image.startswith("inferline/models") else "/tmp"
    volumes = {v["name"]: v for v in container.pod.get("volumes") or []}
    mounts = {m["mountPath"]: m for m in container.spec.get("volumeMounts") or []}
    mount = mounts.get(path)
    if mount is None or mount.get("readOnly"):
        yield f"no writable mount at {path}"
    elif "emptyDir" not in volumes.get(mount["name"], {}):
        yield f"{path} is not an emptyDir"


def probe_violations(container: Container) -> Iterator[str]:
    if container.kind != "containers":
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            if probe in container.spec:
                yield f"an init container has a {probe}"
        return
    for probe in ("readinessProbe", "livenessProbe"):
        if probe not in container.spec:
            yield f"no {probe}"
    if container.name in GRPC_SERVICES and container.image.startswith("inferline/"):
        port = container.probe_port()
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            spec = container.spec.get(probe)
            checked = probe != "startupProbe" or spec is not None
            if checked and (spec or {}).get("grpc") != {"port": port}:
                yield f"{probe} is not a native gRPC probe on its health port {port}"
    if container.name == "triton":
        http = container.port("http")

        def get(probe: str) -> dict[str, Any]:
            return dict((container.spec.get(probe) or {}).get("httpGet") or {})

        if get("readinessProbe") != {"path": "/v2/health/ready", "port": "http"}:
            yield "readiness is not httpGet /v2/health/ready on the http port"
        if get("livenessProbe") != {"path": "/v2/health/live", "port": "http"}:
            yield "liveness is not httpGet /v2/health/live on the http port"
        startup = container.spec.get("startupProbe") or {}
        if get("startupProbe") != {"path": "/v2/health/ready", "port": "http"}:
            yield "no startup probe on /v2/health/ready"
        elif startup.get("periodSeconds", 10) * startup.get("failureThreshold", 3) < STARTUP_S:
            yield f"the startup probe allows less than {STARTUP_S} s to load the models"
        assert http == 8000


CONTAINER_RULES: tuple[Callable[[Container], Iterator[str]], ...] = (
    security_violations, resource_violations, image_violations, scratch_violations,
    probe_violations,
)  # fmt: skip


def container_violations(container: Container) -> list[str]:
    return [f"{container.where}: {v}" for rule in CONTAINER_RULES for v in rule(container)]


def pod_violations(
    obj: dict[str, Any], template: dict[str, Any], objects: list[dict[str, Any]]
) -> Iterator[str]:
    meta = obj["metadata"]
    key = f"{meta.get('namespace')}/{meta['name']}"
    spec = template["spec"]
    where = f"{obj['kind']} {key}"
    token = key in TOKEN_EXCEPTIONS
    if spec.get("automountServiceAccountToken") is not token:
        yield f"{where}: automountServiceAccountToken is not {str(token).lower()}"
    account = spec.get("serviceAccountName")
    if not account or account == "default":
        yield f"{where}: runs as the namespace's default ServiceAccount"
    else:
        sa = [
            o for o in objects
            if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == account
            and o["metadata"].get("namespace") == meta.get("namespace")
        ]  # fmt: skip
        if len(sa) != 1:
            yield f"{where}: its ServiceAccount {account} is not in the manifests"
        elif sa[0].get("automountServiceAccountToken") is not token:
            yield f"{where}: ServiceAccount {account} automountServiceAccountToken is not {token}"
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(host):
            yield f"{where}: {host}"
    pod_context = spec.get("securityContext") or {}
    if (pod_context.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        yield f"{where}: the pod's seccompProfile is not RuntimeDefault"
    names = [c["name"] for kind in ("initContainers", "containers") for c in spec.get(kind) or []]
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            allowed = (
                any("hostPath" in EXCEPTIONS.get((key, name), {}) for name in names)
                and volume["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
            )
            if not allowed:
                yield f"{where}: hostPath volume {volume['name']}"


@pytest.mark.parametrize("target", POLICY_TARGETS)
def test_every_container(target: str) -> None:
    found = list(containers(render(target)))
    assert {container.name for container in found} >= PIPELINE, target
    violations = [v for container in found for v in container_violations(container)]
    assert not violations, "\n".join(violations)


@pytest.mark.parametrize("target", POLICY_TARGETS)
def test_every_pod(target: str) -> None:
    objects = render(target)
    pods = list(pod_specs(objects))
    assert {obj["metadata"]["name"] for obj, _ in pods} >= PIPELINE, target
    violations = [v for obj, t in pods for v in pod_violations(obj, t, objects)]
    assert not violations, "\n".join(violations)


def test_the_checks_catch_a_container_that_breaks_them() -> None:
    """The policy is not vacuous: a new container missing any of it is reported, rule by rule."""
    objects = render("overlays/cpu")
    batcher = find(objects, "Deployment", "batcher")
    pod = batcher["spec"]["template"]["spec"]
    pod["containers"].append(
        {"name": "sidecar", "image": "busybox", "securityContext": {"runAsNonRoot": True}}
    )
    [sidecar] = [c for c in containers([batcher]) if c.name == "sidecar"]
    text = "\n".join(container_violations(sidecar))
    for expected in (
        "readOnlyRootFilesystem", "allowPrivilegeEscalation", "capabilities.drop",
        "seccompProfile", "no cpu request", "no memory limit", "no pinned tag",
        "imagePullPolicy", "no readinessProbe", "no livenessProbe",
    ):  # fmt: skip
        assert expected in text, f"{expected!r} not reported:\n{text}"
    pod["automountServiceAccountToken"] = True
    pod["hostNetwork"] = True
    text = "\n".join(pod_violations(batcher, batcher["spec"]["template"], objects))
    assert "automountServiceAccountToken" in text and "hostNetwork" in text


# -- item 3: the control plane ----------------------------------------------------------------


def rbac(objects: list[dict[str, Any]], kinds: tuple[str, ...]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in kinds]


@pytest.mark.parametrize("target", POLICY_TARGETS)
def test_eds_may_only_read_endpointslices_and_get_pods_in_its_namespace(target: str) -> None:
    objects = render(target)
    role = find(objects, "Role", "eds")
    assert role["metadata"]["namespace"] == NAMESPACE
    rules = sorted(
        (tuple(r["apiGroups"]), tuple(r["resources"]), tuple(sorted(r["verbs"])))
        for r in role["rules"]
    )
    assert rules == [
        (("",), ("pods",), ("get",)),
        (("discovery.k8s.io",), ("endpointslices",), ("get", "list", "watch")),
    ]
    assert not [r for r in role["rules"] if r.get("resourceNames") or r.get("nonResourceURLs")]
    # Bound to eds's ServiceAccount, and nothing else is.
    bindings = [
        b for b in rbac(objects, ("RoleBinding", "ClusterRoleBinding"))
        if {"kind": "ServiceAccount", "name": "eds", "namespace": NAMESPACE} in b["subjects"]
    ]  # fmt: skip
    assert [(b["kind"], b["metadata"]["namespace"], b["roleRef"]) for b in bindings] == [
        ("RoleBinding", NAMESPACE,
         {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "eds"}),
    ]  # fmt: skip
    deployment = find(objects, "Deployment", "eds")
    [eds] = [c for c in containers([deployment]) if c.name == "eds"]
    env = eds.env()
    assert env["INFERLINE_EDS_SOURCE"] == "kubernetes"
    assert env["INFERLINE_EDS_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["INFERLINE_EDS_SERVICES"] == "middleman,middleman-rest,preprocess,batcher,triton"
    assert env["INFERLINE_EDS_PORT_NAME"] == "grpc"
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "eds"


@pytest.mark.parametrize("target", POLICY_TARGETS)
def test_no_role_grants_writes_or_wildcards_and_no_cluster_role_is_defined(target: str) -> None:
    objects = render(target)
    assert not rbac(objects, ("ClusterRole",)), "a ClusterRole: namespace Roles only"
    roles = rbac(objects, ("Role",))
    assert "eds" in {role["metadata"]["name"] for role in roles}, target
    for role in roles:
        for rule in role["rules"]:
            where = f"Role {role['metadata']['namespace']}/{role['metadata']['name']}"
            assert not WRITE_VERBS & set(rule["verbs"]), f"{where}: {rule['verbs']}"
            assert "*" not in rule["resources"] and "*" not in rule["apiGroups"], where
            assert "secrets" not in rule["resources"], where
    # The one cluster binding: the adapter's delegated authentication (a built-in role).
    for binding in rbac(objects, ("ClusterRoleBinding",)):
        assert binding["roleRef"]["name"] == "system:auth-delegator", binding["metadata"]["name"]
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "prometheus-adapter", "namespace": NAMESPACE}
        ]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_envoy_runs_the_ads_bootstrap_with_admin_on_loopback(overlay: str) -> None:
    objects = render(f"overlays/{overlay}")
    deployment = find(objects, "Deployment", "envoy")
    pod = deployment["spec"]["template"]["spec"]
    [envoy] = pod["containers"]
    assert envoy["args"] == [
        "-c", "/etc/envoy/envoy.yaml", "--service-node", "$(POD_NAME)",
        "--drain-time-s", "10", "--drain-strategy", "immediate", "--concurrency", "2",
    ]  # fmt: skip
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in envoy[
        "env"
    ]
    volumes = {v["name"]: v for v in pod["volumes"]}
    [mount] = [m for m in envoy["volumeMounts"] if m["mountPath"] == "/etc/envoy"]
    [init] = pod["initContainers"]  # renders the bootstrap into the volume Envoy reads it from
    assert [m["mountPath"] for m in init["volumeMounts"] if m["name"] == mount["name"]] == [
        "/etc/envoy"
    ]
    assert "emptyDir" in volumes[mount["name"]] and mount["readOnly"]
    bootstrap = envoy_bootstrap(objects).config
    assert bootstrap["dynamic_resources"]["ads_config"]["api_type"] in ("GRPC", "DELTA_GRPC")
    # Admin on the pod's loopback, and not a port of the pod.
    admin = bootstrap["admin"]["address"]["socket_address"]
    assert admin["address"] == "127.0.0.1"
    ports = {p["containerPort"]: p["name"] for p in envoy["ports"]}
    assert admin["port_value"] not in ports
    # Readiness on /ready through the minimal probe listener, whose routes are /ready and
    # /stats/prometheus (GET) and nothing else.
    listeners = {
        listener["name"]: listener for listener in bootstrap["static_resources"]["listeners"]
    }
    probe_port = listeners["probe"]["address"]["socket_address"]["port_value"]
    assert ports[probe_port] == "probe"
    assert envoy["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "probe"}
    assert envoy["livenessProbe"]["httpGet"]["port"] == "probe"
    manager = listeners["probe"]["filter_chains"][0]["filters"][0]["typed_config"]
    routes = manager["route_config"]["virtual_hosts"][0]["routes"]
    assert [r["match"].get("path") for r in routes if "route" in r] == [
        "/ready",
        "/stats/prometheus",
    ]
    assert routes[-1] == {"match": {"prefix": "/"}, "direct_response": {"status": 404}}
    # A preStop drain that ends before the kubelet's grace period does.
    command = envoy["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:4] == ["python", "-m", "inferline_envoy.admin", "--drain"]
    settle = float(command[command.index("--settle-s") + 1])
    timeout = float(command[command.index("--timeout-s") + 1])
    assert pod["terminationGracePeriodSeconds"] > settle + timeout
    # Liveness outlasts the grace period: a draining Envoy (listeners closed) is never restarted.
    live = envoy["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] > pod["terminationGracePeriodSeconds"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_triton_pods_carry_the_weight_annotation(overlay: str) -> None:
    template = find(render(f"overlays/{overlay}"), "Deployment", "triton")["spec"]["template"]
    weight = template["metadata"]["annotations"]["inferline.io/weight"]
    assert re.fullmatch(r"[1-9][0-9]*", weight) and int(weight) <= 65535
