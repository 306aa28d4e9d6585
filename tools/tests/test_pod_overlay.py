"""tools.pods on the real render of the cpu overlay (``kubectl kustomize k8s/overlays/cpu``,
conftest's ``cpu``): its Deployments as pods, their environment and ``podman create``
arguments."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tools.pods import spec
from tools.pods.create import create_args
from tools.pods.environment import Downward, environment
from tools.pods.manifests import Manifests
from tools.pods.spec import SpecError

NAMESPACE = "inferline"  # the cpu overlay's


# --- the cpu overlay as pods ---------------------------------------------------------------------


def test_the_triton_pod_has_its_init_container_and_both_containers(cpu: Manifests) -> None:
    pod = cpu.pod("triton", 1)
    assert pod.name == "triton-1" and pod.namespace == NAMESPACE
    assert [c.name for c in pod.init_containers] == ["models"]
    assert all(c.init for c in pod.init_containers)
    assert [c.name for c in pod.containers] == ["triton", "preprocess"]
    assert not any(c.init for c in pod.containers)
    assert "triton" in pod.aliases
    assert pod.grace_s == 45.0
    assert pod.images[0].endswith("models:0.1.0")


def test_the_triton_pod_shares_a_memory_backed_dev_shm(cpu: Manifests) -> None:
    pod = cpu.pod("triton", 0)
    volumes = {v.name: v for v in pod.volumes}
    assert volumes["shm"] == spec.Volume("shm", "memory", 512 * 2**20)
    assert volumes["models"].kind == "emptyDir"
    for container in pod.containers:
        shm = [m for m in container.mounts if m.target == "/dev/shm"]
        assert shm == [spec.Mount("shm", "/dev/shm")], container.name


def test_the_triton_pods_probes_resolve_named_ports(cpu: Manifests) -> None:
    triton, preprocess = cpu.pod("triton", 0).containers
    assert triton.ports == {"http": 8000, "metrics": 8002}
    assert triton.startup is not None and triton.readiness is not None
    assert (triton.startup.kind, triton.startup.port) == ("http", 8000)
    assert triton.startup.path == "/v2/health/ready" and triton.startup.budget_s == 600.0
    assert preprocess.readiness is not None and preprocess.readiness.kind == "grpc"
    assert preprocess.readiness.port == 8091
    assert triton.pre_stop == ("sleep", "10") and preprocess.pre_stop is None


def test_middleman_is_aliased_by_both_its_services(cpu: Manifests) -> None:
    assert cpu.pod("middleman", 0).aliases == ("middleman", "middleman-rest")


def test_aliases_are_the_services_whose_selector_matches_the_pods_labels() -> None:
    def service(name: str, selector: dict[str, str] | None) -> dict[str, Any]:
        return {"kind": "Service", "metadata": {"name": name}, "spec": {"selector": selector}}

    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "web", "tier": "front"}},
                "spec": {"containers": [{"name": "app", "image": "example/web:1"}]},
            }
        },
    }
    manifests = Manifests(
        [
            deployment,
            service("public", {"app": "web"}),
            service("front", {"app": "web", "tier": "front"}),
            service("web-back", {"app": "web", "tier": "back"}),
            service("web-headless", None),  # no selector: endpoints of its own, no pods
            service("other", {"app": "other"}),
        ]
    )
    pod = manifests.pod("web", 0)
    assert pod.aliases == ("front", "public")
    assert pod.namespace == "default" and pod.service_account == "default"


def test_eds_gets_its_namespace_from_the_downward_api(cpu: Manifests) -> None:
    pod = cpu.pod("eds", 0)
    env = environment(pod.containers[0], Downward(pod, "10.88.0.5"), cpu)
    assert env["INFERLINE_EDS_NAMESPACE"] == NAMESPACE
    assert env["INFERLINE_EDS_SOURCE"] == "kubernetes"
    assert env["INFERLINE_EDS_SERVICES"].split(",")[0] == "middleman"


def test_envoy_gets_its_pod_name_and_passes_it_expanded(cpu: Manifests) -> None:
    pod = cpu.pod("envoy", 2)
    envoy = pod.containers[0]
    env = environment(envoy, Downward(pod, "10.88.0.6"), cpu)
    assert env == {"POD_NAME": "envoy-2"}
    args = create_args(pod, envoy, env, "10001:10001", {"bootstrap": "/b", "tmp": "/t"}, 8)
    assert args[args.index("--service-node") + 1] == "envoy-2"


def triton_create_args(cpu: Manifests, host_cpus: int) -> tuple[list[str], list[str]]:
    """(options, image and arguments) of ``podman create`` for the triton container."""
    pod = cpu.pod("triton", 0)
    triton = pod.containers[0]
    env = environment(triton, Downward(pod, "10.88.0.7"), cpu)
    sources = {v.name: f"/run/pods/triton-0/{v.name}" for v in pod.volumes}
    args = create_args(pod, triton, env, "triton-server", sources, host_cpus)
    at = args.index(triton.image)
    return args[:at], args[at:]


def test_create_args_for_the_triton_container(cpu: Manifests) -> None:
    options, _ = triton_create_args(cpu, host_cpus=2)
    assert options[:2] == ["--pod=triton-0", "--name=triton-0-triton"]
    for expected in (
        "--user=1000:1000",
        "--group-add=1000",
        "--read-only",
        "--read-only-tmpfs=false",
        "--cap-drop=all",
        "--security-opt=no-new-privileges",
        "--cpus=2",
        "--memory=4294967296",
        "--env=INFERLINE_MODEL_REPOSITORY=/models",
        "--env=INFERLINE_TRITON_TOKEN_FILE=/dev/shm/triton-access-token",
    ):
        assert expected in options
    assert [o for o in options if o.startswith("--cpus")] == ["--cpus=2"]
    assert not [o for o in options if o.startswith("--entrypoint")]  # args only: the image's
    mounts = [o for o in options if o.startswith("--mount=")]
    assert mounts == [
        "--mount=type=bind,source=/run/pods/triton-0/models,destination=/models,ro=true",
        "--mount=type=bind,source=/run/pods/triton-0/tmp,destination=/tmp",
        "--mount=type=bind,source=/run/pods/triton-0/tensorrt-cache,"
        "destination=/var/cache/tensorrt",
        "--mount=type=bind,source=/run/pods/triton-0/shm,destination=/dev/shm",
    ]


def test_the_triton_containers_arguments_are_expanded(cpu: Manifests) -> None:
    _, rest = triton_create_args(cpu, host_cpus=16)
    script = cpu.pod("triton", 0).containers[0].spec["args"][2]
    assert rest[1:6] == ["sh", "-c", script, "triton", "tritonserver"]
    assert "--model-repository=/models" in rest
    assert not [a for a in rest if "$(INFERLINE_" in a]
    assert "$(od " in script  # the shell's command substitution is no variable: kept


def test_the_cpu_limit_is_the_manifests_on_a_larger_host(cpu: Manifests) -> None:
    options, _ = triton_create_args(cpu, host_cpus=16)
    assert [o for o in options if o.startswith("--cpus")] == ["--cpus=4"]


def test_an_init_containers_command_is_its_entrypoint(cpu: Manifests) -> None:
    pod = cpu.pod("middleman", 0)
    (cards,) = pod.init_containers
    assert cards.name == "model-cards"
    env = environment(cards, Downward(pod, "10.88.0.8"), cpu)
    args = create_args(pod, cards, env, "10001", {"models": "/m", "tmp": "/t"}, 4)
    entrypoints = [a for a in args if a.startswith("--entrypoint=")]
    assert entrypoints == [f"--entrypoint={json.dumps(cards.spec['command'])}"]
    assert json.loads(entrypoints[0].removeprefix("--entrypoint="))[:2] == ["sh", "-c"]
    assert args[-1] == cards.image  # no args after the image
    assert "--user=10001:10001" in args
    assert "--mount=type=bind,source=/m,destination=/repository" in args


def test_a_mount_of_a_volume_the_pod_lacks_is_a_spec_error(cpu: Manifests) -> None:
    pod = cpu.pod("eds", 0)
    with pytest.raises(SpecError, match="no volume 'tmp' in the pod"):
        create_args(pod, pod.containers[0], {}, "10001", {}, 4)
