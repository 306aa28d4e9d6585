"""make deploy / verify-cluster without a cluster: what deploy would apply (rendered by the real
kubectl kustomize), and how verify reads what kubectl and Envoy's admin API answer.

The steps that need a cluster (apply, rollout, port-forward, scale) are not run here: no
Kubernetes API server runs on this machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from inferline_testing.tools import tool
from tools.cluster import deploy, kube, kustomize, undeploy, verify
from tools.cluster.__main__ import main
from tools.images import IMAGES


def containers(objects: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for obj in objects:
        spec = obj.get("spec", {}).get("template", {}).get("spec", {})
        yield from spec.get("initContainers", [])
        yield from spec.get("containers", [])


@pytest.mark.parametrize("overlay", kustomize.OVERLAYS)
def test_deploy_sets_every_inferline_image_to_the_registry(overlay: str) -> None:
    tool("kubectl", "install kubectl 1.32 (it carries kustomize v5.5)")
    objects = [
        o for o in yaml.safe_load_all(kustomize.render(overlay, "reg.example/team/", "v7")) if o
    ]
    images = {c["image"] for c in containers(objects)}
    ours = {image for image in images if image.startswith("reg.example/team/inferline-")}
    assert ours and all(image.endswith(":v7") for image in ours)
    assert not [image for image in images if image.startswith("inferline/")]  # none left over
    others = images - ours  # Triton, Prometheus, Grafana, …: pinned by their own tags
    assert others and all(":" in image and not image.endswith(":latest") for image in others)


def test_the_deploy_kustomization_names_every_image() -> None:
    made = kustomize.kustomization("cpu", "reg.example/team/", "v7")
    assert made["resources"] == ["../../../k8s/overlays/cpu"]
    assert {i["name"] for i in made["images"]} == {f"inferline/{i.name}" for i in IMAGES}
    assert {
        "name": "inferline/eds",
        "newName": "reg.example/team/inferline-eds",
        "newTag": "v7",
    } in (made["images"])
    with pytest.raises(kube.ClusterError, match="unknown overlay"):
        kustomize.kustomization("tpu", "r", "t")
    with pytest.raises(kube.ClusterError, match="REGISTRY and TAG"):
        kustomize.kustomization("gpu", "", "t")
    with pytest.raises(kube.ClusterError, match="a DNS label"):
        kustomize.kustomization("gpu", "r", "t", "Team_A")


def test_another_namespace_is_the_pipeline_under_it_and_the_per_cluster_components_above() -> None:
    """k8s/README.md, Another namespace: `namespace:` over the overlay's pipeline/, the overlay's
    own components (one per cluster) above it."""
    made = kustomize.kustomization("gpu", "reg.example/team/", "v7", "team-a")
    assert made["resources"] == ["pipeline"]
    assert made["components"] == [
        "../../../k8s/components/dcgm-exporter",
        "../../../k8s/components/prometheus-adapter",
    ]
    assert kustomize.pipeline_kustomization("gpu", "team-a")["namespace"] == "team-a"
    assert kustomize.pipeline_kustomization("gpu", "team-a")["resources"] == [
        "../../../../k8s/overlays/gpu/pipeline"
    ]


@pytest.mark.parametrize("overlay", kustomize.OVERLAYS)
def test_deploy_renders_the_overlay_in_another_namespace(overlay: str) -> None:
    tool("kubectl", "install kubectl 1.32 (it carries kustomize v5.5)")
    rendered = kustomize.render(overlay, "reg.example/team/", "v7", "team-a")
    objects = [o for o in yaml.safe_load_all(rendered) if o]
    where = {o["metadata"].get("namespace") for o in objects} - {None}
    assert where == {"team-a", "kube-system", *(["inferline-dcgm"] if overlay == "gpu" else [])}
    adapter = [o for o in objects if o["kind"] == "APIService"]
    assert adapter and all(o["spec"]["service"]["namespace"] == "team-a" for o in adapter)
    # the default namespace again: the overlay as it is, no pipeline/ left from the last deploy
    default = kustomize.render(overlay, "reg.example/team/", "v7")
    assert {o["metadata"].get("namespace") for o in yaml.safe_load_all(default) if o} >= {
        "inferline"
    }
    with kustomize.render_lock():  # another worker's render of another namespace waits
        kustomize.write_kustomization(overlay, "reg.example/team/", "v7", "team-a")
        folder = kustomize.write_kustomization(overlay, "reg.example/team/", "v7")
        assert not (folder / "pipeline").exists()


@pytest.mark.parametrize(("namespace", "deleted"), [("inferline", True), ("team-a", False)])
def test_undeploy_keeps_a_namespace_of_your_own(
    monkeypatch: pytest.MonkeyPatch, namespace: str, deleted: bool
) -> None:
    """The pipeline's own namespace goes with it; another (a team's) may hold more: kept."""
    tool("kubectl", "install kubectl 1.32 (it carries kustomize v5.5)")
    real, given = kube.kubectl, list[dict[str, Any]]()

    def kubectl(*args: str, input_text: str | None = None, check: bool = True) -> str:
        if args[0] == "kustomize":
            return str(real(*args, input_text=input_text, check=check))
        assert args[0] == "delete"
        given.extend(o for o in yaml.safe_load_all(input_text or "") if o)
        return ""

    monkeypatch.setattr(kube, "kubectl", kubectl)
    undeploy.undeploy("cpu", namespace)
    spaces = {o["metadata"]["name"] for o in given if o["kind"] == "Namespace"}
    assert (namespace in spaces) is deleted
    assert {o["metadata"].get("namespace") for o in given} - {None} == {namespace, "kube-system"}


def pod(name: str, ip: str, phase: str = "Running", ready: str = "True") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "phase": phase,
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def test_only_running_ready_pods_count() -> None:
    listed = {
        "items": [
            pod("triton-a", "10.0.0.1"),
            pod("triton-b", "10.0.0.2", ready="False"),  # still loading the model
            pod("triton-c", "10.0.0.3", phase="Pending"),
            pod("triton-d", ""),  # no IP yet
        ]
    }
    assert verify.pod_ips(listed) == {"triton-a": "10.0.0.1"}


def test_envoy_hosts_of_the_triton_cluster() -> None:
    clusters = {
        "cluster_statuses": [
            {"name": "batcher", "host_statuses": [host("10.0.1.1", 5)]},
            {"name": "triton", "host_statuses": [host("10.0.0.1", 40), host("10.0.0.2", 0)]},
        ]
    }
    assert verify.triton_hosts(clusters) == {"10.0.0.1": 40, "10.0.0.2": 0}


def host(address: str, requests: int) -> dict[str, Any]:
    """One host as Envoy's /clusters?format=json shows it."""
    return {
        "address": {"socket_address": {"address": address, "port_value": 8001}},
        "stats": [{"name": "rq_total", "value": str(requests)}],
        "health_status": {"eds_health_status": "HEALTHY"},
    }


def test_deploy_explains_what_is_missing(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["deploy", "--overlay", "gpu", "--dry-run"]) == 1
    assert "REGISTRY and TAG are needed" in capsys.readouterr().err


def test_verify_waits_for_the_pipeline_first_then_what_the_placement_adds() -> None:
    found = ["prometheus", "middleman", "preprocess", "triton", "batcher", "envoy", "eds"]
    assert verify.rollout_order(found) == [
        *kustomize.DEPLOYMENTS,
        "preprocess",  # a pool of its own: the remote placement
        "prometheus",
    ]
    # in-pod and in-process have no preprocess Deployment: nothing waits for one
    assert "preprocess" not in verify.rollout_order(list(kustomize.DEPLOYMENTS))


def test_verify_names_the_deployments_it_cannot_find() -> None:
    with pytest.raises(kube.ClusterError, match=r"no deployment triton, batcher .*make deploy"):
        verify.rollout_order(["eds", "envoy", "middleman"])


class RecordedKubectl:
    """kubectl as the API server would answer these calls: the Secrets it holds by name."""

    def __init__(self, secrets: set[str]) -> None:
        self.secrets = secrets
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, *args: str, input_text: str | None = None, check: bool = True) -> str:
        self.calls.append(args)
        if args[2:4] == ("get", "secret"):
            return f"secret/{args[4]}\n" if args[4] in self.secrets else ""
        if args[2:5] == ("create", "secret", "generic"):
            assert args[5] not in self.secrets, "created twice"
            self.secrets.add(args[5])
            return f"secret/{args[5]} created\n"
        raise AssertionError(f"unexpected kubectl {args}")


def test_grafanas_admin_password_is_generated_once_and_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = RecordedKubectl(set())
    monkeypatch.setattr(kube, "kubectl", api)
    assert "generated" in deploy.ensure_grafana_admin()
    [create] = [c for c in api.calls if "create" in c]
    password = create[-1].removeprefix("--from-literal=password=")
    assert len(password) >= 32 and password != "admin"
    assert "kept" in deploy.ensure_grafana_admin()  # a second deploy leaves it alone
    assert len([c for c in api.calls if "create" in c]) == 1


class ServerSideApply:
    """kubectl against an API server that keeps, for the fields these tests follow, each value
    and its field manager, and refuses a server-side apply that would change a field another
    manager set, unless forced (Kubernetes' server-side apply: "Apply failed with 1 conflict").
    Rendering (kubectl kustomize) runs the real kubectl."""

    def __init__(self, real: Any, hpa: bool = True) -> None:
        self.real, self.hpa = real, hpa
        self.fields: dict[str, tuple[int, str]] = {}  # "hpa/triton minReplicas" -> value, manager
        self.applies = 0

    def set(self, field: str, value: int, manager: str, force: bool) -> None:
        current = self.fields.get(field)
        if current and current[1] != manager and current[0] != value and not force:
            raise kube.ClusterError(
                f'Apply failed with 1 conflict: conflict with "{current[1]}": {field}'
            )
        self.fields[field] = (value, manager)

    def __call__(self, *args: str, input_text: str | None = None, check: bool = True) -> str:
        if args[0] == "kustomize":
            return str(self.real(*args, input_text=input_text, check=check))
        if args[:2] == ("get", "apiservice"):
            return ""  # no other adapter in this cluster
        if args[0] == "apply":
            assert "--server-side" in args
            manager = next(a.split("=", 1)[1] for a in args if a.startswith("--field-manager"))
            for obj in yaml.safe_load_all(input_text or ""):
                if obj and obj["kind"] == "HorizontalPodAutoscaler":
                    field = f"hpa/{obj['metadata']['name']} minReplicas"
                    self.set(
                        field, obj["spec"]["minReplicas"], manager, "--force-conflicts" in args
                    )
            self.applies += 1
            return "applied\n"
        verb, kind, name = args[2], args[3], args[4] if len(args) > 4 else ""
        if (verb, kind) == ("get", "hpa"):
            if not self.hpa:
                return ""
            if "-o" in args and args[-1].startswith("jsonpath"):
                return str(self.fields["hpa/triton minReplicas"][0])
            return "horizontalpodautoscaler.autoscaling/triton\n"
        if (verb, kind) == ("patch", "hpa"):
            value = json.loads(args[-1])["spec"]["minReplicas"]
            self.set(f"hpa/{name} minReplicas", value, "kubectl-patch", force=True)
            return "patched\n"
        if (verb, kind) == ("get", "deployment"):
            return str(self.fields.get("deployment/triton replicas", (1, ""))[0])
        if (verb, kind) == ("scale", "deployment/triton"):
            self.fields["deployment/triton replicas"] = (int(args[-1].split("=")[1]), "kubectl")
            return "scaled\n"
        if (verb, kind) == ("get", "secret"):
            return "secret/grafana-admin\n"  # made by an earlier deploy: kept
        raise AssertionError(f"unexpected kubectl {args}")


def test_deploy_then_verify_then_deploy_again_applies_cleanly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """verify raises the Triton HPA's floor to scale up; it is set back when verify is done, and
    a deploy after it applies (a field changed by hand would not fail it either)."""
    tool("kubectl", "install kubectl 1.32 (it carries kustomize v5.5)")
    api = ServerSideApply(kube.kubectl)
    monkeypatch.setattr(kube, "kubectl", api)
    # As many ready Triton pods as the HPA's floor asks for (the cluster scales to it).
    monkeypatch.setattr(verify, "triton_pods", lambda namespace: {
        f"triton-{i}": f"10.0.0.{i}" for i in range(api.fields["hpa/triton minReplicas"][0])
    })  # fmt: skip
    deploy.deploy("gpu", "reg.example/", "v1", dry_run=False)
    floor = api.fields["hpa/triton minReplicas"]
    assert floor[1] == deploy.FIELD_MANAGER
    with verify.triton_scaled(floor[0] + 1):
        assert api.fields["hpa/triton minReplicas"] == (floor[0] + 1, "kubectl-patch")
    assert api.fields["hpa/triton minReplicas"][0] == floor[0]  # set back
    with pytest.raises(RuntimeError), verify.triton_scaled(floor[0] + 1):
        raise RuntimeError("the demo client saw errors")
    assert api.fields["hpa/triton minReplicas"][0] == floor[0]  # set back on a failure too
    api.set("hpa/triton minReplicas", 5, "kubectl-edit", force=True)  # changed by hand
    deploy.deploy("gpu", "reg.example/", "v1", dry_run=False)
    assert api.applies == 2
    assert api.fields["hpa/triton minReplicas"] == floor  # the manifests win


def test_without_an_hpa_the_deployment_is_scaled_and_set_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = ServerSideApply(kube.kubectl, hpa=False)
    monkeypatch.setattr(kube, "kubectl", api)
    monkeypatch.setattr(verify, "triton_pods", lambda namespace: {
        f"triton-{i}": f"10.0.0.{i}" for i in range(api.fields["deployment/triton replicas"][0])
    })  # fmt: skip
    with verify.triton_scaled(2):
        assert api.fields["deployment/triton replicas"][0] == 2
    assert api.fields["deployment/triton replicas"][0] == 1


def apiservice(namespace: str, name: str) -> str:
    return json.dumps({"spec": {"service": {"namespace": namespace, "name": name}}})


@pytest.mark.parametrize(
    ("registered", "refused"),
    [
        ("", False),  # nobody serves the custom metrics API yet
        (apiservice("inferline", "prometheus-adapter"), False),  # ours, from an earlier deploy
        (apiservice("monitoring", "kube-prometheus-stack-prometheus-adapter"), True),
    ],
)
def test_deploy_refuses_to_take_the_custom_metrics_api_from_another_adapter(
    monkeypatch: pytest.MonkeyPatch, registered: str, refused: bool
) -> None:
    tool("kubectl", "install kubectl 1.32 (it carries kustomize v5.5)")
    real, applied = kube.kubectl, []

    def kubectl(*args: str, input_text: str | None = None, check: bool = True) -> str:
        if args[0] == "kustomize":
            return str(real(*args, input_text=input_text, check=check))
        if args[:2] == ("get", "apiservice"):
            assert args[2] in ("v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io")
            return registered
        if args[0] == "apply":
            applied.append(args)
            return ""
        if args[2:4] == ("get", "secret"):
            return "secret/grafana-admin\n"
        raise AssertionError(f"unexpected kubectl {args}")

    monkeypatch.setattr(kube, "kubectl", kubectl)
    if refused:
        with pytest.raises(kube.ClusterError, match="already served by monitoring/kube-prom"):
            deploy.deploy("gpu", "reg.example/", "v1", dry_run=False)
        assert not applied  # nothing applied at all
    else:
        deploy.deploy("gpu", "reg.example/", "v1", dry_run=False)
        assert len(applied) == 1
