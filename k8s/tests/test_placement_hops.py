"""Each placement's hops as rendered. In every placement middleman dials the batchers proxyless
(xds:///batcher, gRPC's xDS client bootstrapped at eds), and through Envoy's batcher listener with
components/through-envoy (on its own, in every placement, or in components/mtls, which includes
it). For each placement, the network policies allow exactly its hops, the batcher hop as
middleman dials it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from inferline_envoy import proxyless
from k8s.tests.manifests import (
    ENVOY_URL,
    EVERYTHING_THROUGH_ENVOY,
    NAMESPACE,
    OVERLAYS,
    PROXYLESS_URL,
    TARGETS,
    Container,
    containers,
    envoy_bootstrap,
    find,
    pod_specs,
    render,
    target_components,
)

# -- the batcher hop: proxyless by default, through Envoy with components/through-envoy or mtls ---

EDS_ADDRESS = "eds:18000"  # Service eds, port grpc: what the bootstrap's ADS dials
NODE_ID = "$(POD_NAME)"  # the pod's name, expanded by the kubelet
# Every render of the base without components/through-envoy (each placement, the overlays), and
# with it: on its own (the base's placement, then each placement with every other component), and
# in components/mtls, which includes it.
PROXYLESS_TARGETS = (
    *(f"overlays/{o}" for o in OVERLAYS), "everything/remote", "everything/in-process",
    "components/in-pod", "components/in-process", "components/network-policies",
)  # fmt: skip
MTLS_TARGETS = ("everything", "components/mtls")
ENVOY_HOP_TARGETS = ("components/through-envoy", *EVERYTHING_THROUGH_ENVOY, *MTLS_TARGETS)
XDS_ENV = (proxyless.BOOTSTRAP_CONFIG_ENV, proxyless.BOOTSTRAP_FILE_ENV, "POD_NAME")


def middleman(objects: list[dict[str, Any]]) -> Container:
    [found] = [c for c in containers([find(objects, "Deployment", "middleman")])
               if c.kind == "containers" and c.name == "middleman"]  # fmt: skip
    return found


def test_every_render_is_checked_for_its_batcher_dialling() -> None:
    """The everything renders and the overlays: each in one of the two lists below; every render
    with components/through-envoy or components/mtls in the second."""
    covered = {*PROXYLESS_TARGETS, *ENVOY_HOP_TARGETS}
    assert {*(f"overlays/{o}" for o in OVERLAYS), *HOPS} <= covered
    through_envoy = {
        t for t in TARGETS
        if not t.startswith("overlays/") and {"through-envoy", "mtls"} & {*target_components(t)}
    }  # fmt: skip
    assert through_envoy == set(ENVOY_HOP_TARGETS)
    assert not set(PROXYLESS_TARGETS) & through_envoy


@pytest.mark.parametrize("target", PROXYLESS_TARGETS)
def test_middleman_dials_the_batchers_proxyless_bootstrapped_at_eds(target: str) -> None:
    objects = render(target)
    found = middleman(objects)
    env = found.env()
    assert env["INFERLINE_MIDDLEMAN_TRITON_URL"] == PROXYLESS_URL
    # The bootstrap is the one proxyless.bootstrap writes (the local stack's too), the JSON
    # itself: no file to mount; none named besides.
    bootstrap = json.loads(env[proxyless.BOOTSTRAP_CONFIG_ENV])
    assert bootstrap == proxyless.bootstrap(EDS_ADDRESS, NODE_ID)
    assert proxyless.BOOTSTRAP_FILE_ENV not in env
    # $(POD_NAME) expands: declared before the bootstrap (the kubelet expands only those), from
    # the pod's name.
    names = [e["name"] for e in found.spec["env"]]
    assert names.index("POD_NAME") < names.index(proxyless.BOOTSTRAP_CONFIG_ENV)
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # What it dials is there: Service eds on that port, which serves cluster `batcher` from
    # Service batcher's EndpointSlices (their port `grpc`: the batchers' gRPC port).
    host, port = EDS_ADDRESS.split(":")
    eds_ports = find(objects, "Service", host)["spec"]["ports"]
    assert [p["port"] for p in eds_ports if p["name"] == "grpc"] == [int(port)]
    [eds] = [c for c in containers([find(objects, "Deployment", "eds")]) if c.name == "eds"]
    cluster = PROXYLESS_URL.removeprefix("xds:///")
    assert cluster in eds.env()["INFERLINE_EDS_SERVICES"].split(",")
    assert not any(k.startswith("INFERLINE_EDS_TLS_") for k in eds.env()), "ADS in plaintext"
    batcher_ports = find(objects, "Service", cluster)["spec"]["ports"]
    assert [p["name"] for p in batcher_ports] == [eds.env()["INFERLINE_EDS_PORT_NAME"]]


@pytest.mark.parametrize("target", ENVOY_HOP_TARGETS)
def test_with_through_envoy_or_mtls_middleman_dials_the_batchers_through_envoy(target: str) -> None:
    """components/through-envoy: Envoy's batcher listener carries the hop, no proxyless bootstrap
    left. Over mTLS exactly under components/mtls, which includes it: a proxyless client presents
    no certificate, which the batchers' (and eds's) mTLS ports ask for, and Envoy presents its
    own."""
    objects = render(target)
    env = middleman(objects).env()
    assert env["INFERLINE_MIDDLEMAN_TRITON_URL"] == ENVOY_URL
    assert not set(XDS_ENV) & set(env), "no proxyless bootstrap"
    # Envoy's listener on that port routes to its batcher cluster; Service envoy has that port.
    params = envoy_bootstrap(objects).params
    host, port = ENVOY_URL.split(":")
    assert dict(params.listeners)["batcher"] == int(port)
    service_ports = find(objects, "Service", host)["spec"]["ports"]
    assert {p["name"]: p["port"] for p in service_ports}["batcher"] == int(port)
    # mTLS on that hop with components/mtls only: through-envoy alone changes no TLS.
    under_mtls = target in MTLS_TARGETS
    [batcher] = [c for c in containers([find(objects, "Deployment", "batcher")])
                 if c.name == "batcher"]  # fmt: skip
    assert ("INFERLINE_BATCHER_TLS_CA" in batcher.env()) == under_mtls, "the batchers' mTLS"
    assert ("batcher" in params.tls_clusters) == under_mtls, "Envoy's mTLS to the batchers"


# -- the network policies: exactly each placement's hops ------------------------------------------


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        assert expression["operator"] in ("In", "NotIn"), expression
        inside = labels.get(expression["key"]) in expression["values"]
        if inside != (expression["operator"] == "In"):
            return False
    return True


def rule_allows(rule: dict[str, Any], peers: str, labels: dict[str, str], port: int) -> bool:
    """One ingress (peers "from") or egress ("to") rule: the other pod (``labels``, in the
    namespace) on ``port``."""
    ports = rule.get("ports")
    if ports is not None and not any(p.get("port") == port for p in ports):
        return False
    others = rule.get(peers)
    if others is None:
        return True
    return any(
        "podSelector" in peer and "namespaceSelector" not in peer
        and selects(peer["podSelector"], labels)
        for peer in others
    )  # fmt: skip


def allows(policies: list[dict[str, Any]], kind: str, own: dict[str, str],
           other: dict[str, str], port: int) -> bool:  # fmt: skip
    """Whether the policies selecting a pod (``own``) let it take (Ingress) or make (Egress) a
    connection with ``other`` on ``port``; a pod no policy of that type selects is open."""
    mine = [p for p in policies if kind in p["spec"]["policyTypes"]
            and selects(p["spec"]["podSelector"], own)]  # fmt: skip
    if not mine:
        return True
    field, peers = ("ingress", "from") if kind == "Ingress" else ("egress", "to")
    return any(
        rule_allows(rule, peers, other, port) for p in mine for rule in p["spec"].get(field) or []
    )


def namespace_policies(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "NetworkPolicy"
            and o["metadata"]["namespace"] == NAMESPACE]  # fmt: skip


def namespace_pods(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The namespace's pod templates by their name label."""
    return {
        template["metadata"]["labels"]["app.kubernetes.io/name"]: template
        for obj, template in pod_specs(objects)
        if obj["metadata"]["namespace"] == NAMESPACE
    }


def hops(objects: list[dict[str, Any]]) -> set[tuple[str, str, int]]:
    """(from, to, port) between the namespace's pods that the policies allow both ways, on every
    port a pod declares or a policy names."""
    policies, pods = namespace_policies(objects), namespace_pods(objects)
    named = {
        p["port"]
        for policy in policies
        for field in ("ingress", "egress")
        for rule in policy["spec"].get(field) or []
        for p in rule.get("ports") or []
    }
    found = set()
    for target, template in pods.items():
        declared = {
            p["containerPort"] for c in template["spec"]["containers"] for p in c.get("ports") or []
        }
        for source, source_template in pods.items():
            src, dst = source_template["metadata"]["labels"], template["metadata"]["labels"]
            for port in declared | named:
                if allows(policies, "Egress", src, dst, port) and allows(
                    policies, "Ingress", dst, src, port
                ):
                    found.add((source, target, port))
    return found


# Pod to pod in every placement: Envoy's ADS, the batch hop, Envoy → middleman, monitoring, and
# what the API-server and DNS rules allow among pods (the adapter's 6443).
COMMON = {
    ("envoy", "eds", 18000), ("batcher", "envoy", 8083),
    ("envoy", "middleman", 8090), ("envoy", "middleman", 8093),
    ("prometheus", "middleman", 9180), ("prometheus", "batcher", 9182),
    ("prometheus", "eds", 9183), ("prometheus", "triton", 8002), ("prometheus", "envoy", 9902),
    ("grafana", "prometheus", 9090), ("prometheus-adapter", "prometheus", 9090),
    ("prometheus", "alertmanager", 9093),
    ("eds", "prometheus-adapter", 6443), ("prometheus", "prometheus-adapter", 6443),
    ("prometheus-adapter", "prometheus-adapter", 6443),
}  # fmt: skip
# The batcher hop: middleman to the batcher pods and to eds (its proxyless channel's ADS), by
# default; middleman → Envoy :8082 → batcher with components/through-envoy (or mtls).
PROXYLESS_HOP = {("middleman", "batcher", 8092), ("middleman", "eds", 18000)}
ENVOY_HOP = {("middleman", "envoy", 8082), ("envoy", "batcher", 8092)}
# Each placement's own: the decoders' hops, and how Envoy reaches Triton.
IN_POD_HOPS = {("envoy", "triton", 8091), ("prometheus", "triton", 9181)}
REMOTE_HOPS = {
    ("middleman", "envoy", 8081), ("envoy", "preprocess", 8091), ("envoy", "triton", 8001),
    ("prometheus", "preprocess", 9181),
}  # fmt: skip
IN_PROCESS_HOPS = {("envoy", "triton", 8001)}
# components/tracing (in every `everything`): each traced workload's spans to the collector.
SPANS = {(w, "otel-collector", 4318) for w in ("envoy", "middleman", "batcher", "eds", "triton")}
REMOTE_SPANS = SPANS | {("preprocess", "otel-collector", 4318)}  # the pool's too
HOPS = {
    "everything/remote": COMMON | PROXYLESS_HOP | REMOTE_HOPS | REMOTE_SPANS,
    "everything/remote/through-envoy": COMMON | ENVOY_HOP | REMOTE_HOPS | REMOTE_SPANS,
    "everything": COMMON | ENVOY_HOP | IN_POD_HOPS | SPANS,  # with components/mtls
    "everything/through-envoy": COMMON | ENVOY_HOP | IN_POD_HOPS | SPANS,
    "everything/in-process": COMMON | PROXYLESS_HOP | IN_PROCESS_HOPS | SPANS,
    "everything/in-process/through-envoy": COMMON | ENVOY_HOP | IN_PROCESS_HOPS | SPANS,
    **{f"overlays/{o}": COMMON | PROXYLESS_HOP | IN_POD_HOPS for o in OVERLAYS},
}  # fmt: skip


@pytest.mark.parametrize("target", HOPS)
def test_the_policies_allow_exactly_each_placements_hops_proxyless_or_through_envoy(
    target: str,
) -> None:
    """Each placement's hops; the batcher hop proxyless (middleman → batcher, middleman → eds)
    but with components/through-envoy (the `/through-envoy` renders, and `everything` through
    components/mtls): middleman → Envoy :8082 → batcher."""
    found = hops(render(target))
    expected = HOPS[target]
    assert found == expected, (
        f"{target}: allowed but not expected {sorted(found - expected)}; "
        f"expected but not allowed {sorted(expected - found)}"
    )


@pytest.mark.parametrize("target", HOPS)
def test_the_policies_allow_the_batcher_hop_as_middleman_dials_it(target: str) -> None:
    """Proxyless: to the batcher pods and eds, and no way through Envoy's batcher listener
    left open; through Envoy (components/through-envoy, or mtls): that way only."""
    objects = render(target)
    found = hops(objects)
    proxyless_hop = middleman(objects).env()["INFERLINE_MIDDLEMAN_TRITON_URL"] == PROXYLESS_URL
    allowed, closed = (PROXYLESS_HOP, ENVOY_HOP) if proxyless_hop else (ENVOY_HOP, PROXYLESS_HOP)
    assert allowed <= found, sorted(allowed - found)
    assert not closed & found, sorted(closed & found)
    # Closed at both ends: neither the source's egress nor the target's ingress lets it through.
    policies, pods = namespace_policies(objects), namespace_pods(objects)
    for source, target_pod, port in closed:
        src, dst = (pods[name]["metadata"]["labels"] for name in (source, target_pod))
        assert not allows(policies, "Egress", src, dst, port), (source, target_pod, port, "egress")
        assert not allows(policies, "Ingress", dst, src, port), (
            source,
            target_pod,
            port,
            "ingress",
        )


def test_the_hop_check_sees_a_policy_that_allows_too_much() -> None:
    """Not vacuous: a port added to Envoy's way to the GPU pods shows up as a hop."""
    objects = render("overlays/cpu")
    policy = find(objects, "NetworkPolicy", "triton")
    policy["spec"]["ingress"][0]["ports"].append({"port": 8001, "protocol": "TCP"})
    envoy = find(objects, "NetworkPolicy", "envoy")
    [to_triton] = [r for r in envoy["spec"]["egress"]
                   if r["to"][0].get("podSelector", {}).get("matchLabels", {}).get(
                       "app.kubernetes.io/name") == "triton"]  # fmt: skip
    to_triton["ports"].append({"port": 8001, "protocol": "TCP"})
    assert ("envoy", "triton", 8001) in hops(objects)
