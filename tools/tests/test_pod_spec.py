"""tools.pods, pure: quantities, the kubelet's $(VAR) expansion, probes, and the real render
of the cpu overlay (``kubectl kustomize k8s/overlays/cpu``) as pods and ``podman create``
arguments; ConfigMap and Secret volumes and environment from small hand-made objects."""

from __future__ import annotations

import base64
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tools.pods import spec
from tools.pods.create import create_args, security_args
from tools.pods.environment import Downward, environment, expand
from tools.pods.manifests import Manifests
from tools.pods.spec import Probe, SpecError

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "inferline"  # the cpu overlay's


# --- quantities ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quantity", "cores"),
    [
        ("500m", 0.5),
        ("2", 2.0),
        (2, 2.0),
        ("1.5", 1.5),
        ("250m", 0.25),
        ("0.1", 0.1),
        ("1m", 0.001),
    ],
)
def test_parse_cpu(quantity: object, cores: float) -> None:
    assert spec.parse_cpu(quantity) == pytest.approx(cores)


@pytest.mark.parametrize(
    ("quantity", "size"),
    [
        ("256Mi", 256 * 2**20),
        ("1Gi", 2**30),
        ("4Gi", 4294967296),
        ("1G", 10**9),
        ("129e6", 129_000_000),
        ("128974848", 128974848),
        (1024, 1024),
        ("64Ki", 65536),
        ("1.5Gi", 1610612736),
        ("500M", 500_000_000),
        ("2k", 2000),
    ],
)
def test_parse_memory(quantity: object, size: int) -> None:
    assert spec.parse_memory(quantity) == size


@pytest.mark.parametrize("quantity", ["", "abc", "1Gi", "-1", "2 cores", "1.2.3", ".", "1e3"])
def test_bad_cpu_quantities_are_spec_errors(quantity: str) -> None:
    with pytest.raises(SpecError, match="CPU quantity"):
        spec.parse_cpu(quantity)


@pytest.mark.parametrize("quantity", ["", "abc", "1GB", "1gi", "-1Gi", "1.2.3", ".", "Gi", "1 Gi"])
def test_bad_memory_quantities_are_spec_errors(quantity: str) -> None:
    with pytest.raises(SpecError, match="memory quantity"):
        spec.parse_memory(quantity)


# --- $(VAR) --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expanded"),
    [
        ("$(A)", "one"),
        ("--model-repository=$(A)/models", "--model-repository=one/models"),
        ("$(A)$(B)", "onetwo"),
        ("$(UNDEFINED)", "$(UNDEFINED)"),
        ("x$(UNDEFINED)y$(A)", "x$(UNDEFINED)yone"),
        ("$$(A)", "$(A)"),  # escaped: the literal
        ("$$$(A)", "$one"),
        ("$$", "$"),
        ("cost: $5 and $A and ${A}", "cost: $5 and $A and ${A}"),  # not $(…): as written
        ("$(A", "$(A"),  # not closed
        ("$(EMPTY)", ""),
        ("token=$(od -An -N24 /dev/urandom)", "token=$(od -An -N24 /dev/urandom)"),
        ("(A) $ (A) $(A))", "(A) $ (A) one)"),
        ("$(A$(B))", "$(A$(B))"),  # the name runs to the first ")": A$(B, undefined
    ],
)
def test_expand_follows_the_kubelet(text: str, expanded: str) -> None:
    assert expand(text, {"A": "one", "B": "two", "EMPTY": ""}) == expanded


# --- probes --------------------------------------------------------------------------------------

PORTS = {"http": 8000, "grpc": 8091}


def test_a_grpc_probe_with_its_timing() -> None:
    found = spec.probe(
        {"grpc": {"port": 8091, "service": "readiness"}, "periodSeconds": 5, "failureThreshold": 2},
        PORTS,
        "here",
    )
    assert found == Probe(
        kind="grpc", port=8091, service="readiness", period_s=5.0, failure_threshold=2
    )
    assert found.budget_s == 10.0


def test_an_http_probe_resolves_a_named_port() -> None:
    found = spec.probe(
        {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "initialDelaySeconds": 3},
        PORTS,
        "here",
    )
    assert found is not None
    assert (found.kind, found.port, found.scheme) == ("http", 8000, "HTTP")
    assert found.path == "/v2/health/ready"
    assert found.budget_s == 3 + 10 * 3  # the kubelet's defaults: every 10 s, 3 failures


def test_a_tcp_probe_takes_a_port_number_as_text() -> None:
    found = spec.probe({"tcpSocket": {"port": "9000"}, "timeoutSeconds": 2}, PORTS, "here")
    assert found == Probe(kind="tcp", port=9000, timeout_s=2.0)


def test_an_exec_probe_keeps_its_command() -> None:
    found = spec.probe(
        {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 2, "failureThreshold": 150},
        PORTS,
        "here",
    )
    assert found is not None and found.kind == "exec" and found.command == ("cat", "/tmp/ready")
    assert found.budget_s == 300.0


def test_no_probe_is_none() -> None:
    assert spec.probe(None, PORTS, "here") is None
    assert spec.probe({}, PORTS, "here") is None


def test_an_unknown_port_name_or_probe_kind_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"^pod x readinessProbe: port 'metrics' is not a number"):
        spec.probe({"httpGet": {"port": "metrics"}}, PORTS, "pod x readinessProbe")
    with pytest.raises(SpecError, match="a probe of no kind the runner knows"):
        spec.probe({"periodSeconds": 5}, PORTS, "here")


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


# --- the security context ------------------------------------------------------------------------


def pod_of(
    container: dict[str, Any], security: dict[str, Any] | None = None
) -> tuple[spec.Pod, spec.Container]:
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "securityContext": security or {},
                    "containers": [{"name": "app", "image": "example/web:1", **container}],
                },
            }
        },
    }
    pod = Manifests([deployment]).pod("web", 0)
    return pod, pod.containers[0]


def test_run_as_non_root_refuses_a_root_uid() -> None:
    pod, app = pod_of({"securityContext": {"runAsNonRoot": True, "runAsUser": 0}})
    with pytest.raises(SpecError, match=r"^web-0 container app: runAsNonRoot, and .* as root"):
        security_args(pod, app, "1000")
    pod, app = pod_of({}, {"runAsNonRoot": True})
    with pytest.raises(SpecError, match=r"^web-0 container app: .* would run as root"):
        security_args(pod, app, "0:0")  # the image's user is root


def test_run_as_non_root_refuses_an_image_user_it_cannot_verify() -> None:
    pod, app = pod_of({"securityContext": {"runAsNonRoot": True}})
    with pytest.raises(SpecError, match=r"^web-0 container app: .*'nobody' is not numeric"):
        security_args(pod, app, "nobody")
    with pytest.raises(SpecError, match=r"^web-0 container app: .*'root' is not numeric"):
        security_args(pod, app, "")


def test_run_as_non_root_accepts_a_numeric_user() -> None:
    pod, app = pod_of({"securityContext": {"runAsNonRoot": True}})
    assert security_args(pod, app, "10001") == []  # the image's user, as it is
    pod, app = pod_of({"securityContext": {"runAsNonRoot": True, "runAsUser": 1000}})
    assert security_args(pod, app, "nobody") == ["--user=1000"]


def test_the_containers_security_context_wins_over_the_pods() -> None:
    pod, app = pod_of(
        {"securityContext": {"runAsUser": 2000, "runAsGroup": 3000}},
        {"runAsUser": 1000, "runAsGroup": 1000, "fsGroup": 4000, "supplementalGroups": [5000]},
    )
    assert security_args(pod, app, "") == [
        "--user=2000:3000",
        "--group-add=4000",
        "--group-add=5000",
    ]


def test_capabilities_and_privileges() -> None:
    pod, app = pod_of(
        {
            "securityContext": {
                "privileged": True,
                "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
            }
        }
    )
    assert security_args(pod, app, "") == [
        "--privileged",
        "--cap-drop=all",
        "--cap-add=net_bind_service",
    ]


@pytest.mark.parametrize(
    ("profile", "args"),
    [
        (None, []),
        ({"type": "RuntimeDefault"}, []),
        ({"type": "Unconfined"}, ["--security-opt=seccomp=unconfined"]),
    ],
)
def test_seccomp_profiles_the_runner_maps(profile: dict[str, str] | None, args: list[str]) -> None:
    pod, app = pod_of({"securityContext": {"seccompProfile": profile} if profile else {}})
    assert security_args(pod, app, "") == args


def test_a_localhost_seccomp_profile_is_refused() -> None:
    profile = {"type": "Localhost", "localhostProfile": "profiles/strict.json"}
    pod, app = pod_of({}, {"seccompProfile": profile})
    with pytest.raises(SpecError, match=r"^web-0 container app: seccompProfile Localhost"):
        security_args(pod, app, "")


# --- ConfigMaps and Secrets ----------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


CONFIG_MAP = {
    "kind": "ConfigMap",
    "metadata": {"name": "settings"},
    "data": {"LEVEL": "debug", "config.yaml": "a: 1\n"},
    "binaryData": {"blob.bin": b64(b"\x00\x01\xff")},
}
SECRET = {
    "kind": "Secret",
    "metadata": {"name": "credentials"},
    "data": {"password": b64(b"s3cret\n"), "TOKEN": b64(b"t0ken")},
    "stringData": {"user": "admin"},
}
PLAIN = {"kind": "ConfigMap", "metadata": {"name": "plain"}, "data": CONFIG_MAP["data"]}


def files_pod(volumes: list[dict[str, Any]], container: dict[str, Any] | None = None) -> spec.Pod:
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "web"}, "annotations": {"team": "ml"}},
                "spec": {
                    "volumes": volumes,
                    "containers": [{"name": "app", "image": "example/web:1", **(container or {})}],
                },
            }
        },
    }
    return Manifests([deployment, CONFIG_MAP, PLAIN, SECRET]).pod("web", 0)


def test_a_config_map_volume_holds_its_data_and_binary_data() -> None:
    (volume,) = files_pod([{"name": "conf", "configMap": {"name": "settings"}}]).volumes
    assert volume.kind == "files"
    assert dict(volume.files) == {
        "LEVEL": (b"debug", 0o644),
        "config.yaml": (b"a: 1\n", 0o644),
        "blob.bin": (b"\x00\x01\xff", 0o644),
    }


def test_a_secret_volume_decodes_its_data_with_the_default_mode() -> None:
    source = {"secretName": "credentials", "defaultMode": 0o440}
    (volume,) = files_pod([{"name": "creds", "secret": source}]).volumes
    assert dict(volume.files) == {
        "password": (b"s3cret\n", 0o440),
        "TOKEN": (b"t0ken", 0o440),
        "user": (b"admin", 0o440),
    }


def test_items_choose_keys_paths_and_modes() -> None:
    source = {
        "secretName": "credentials",
        "defaultMode": 0o400,
        "items": [
            {"key": "password", "path": "admin/password"},
            {"key": "user", "path": "admin/user", "mode": 0o444},
        ],
    }
    (volume,) = files_pod([{"name": "creds", "secret": source}]).volumes
    assert dict(volume.files) == {
        "admin/password": (b"s3cret\n", 0o400),
        "admin/user": (b"admin", 0o444),
    }


def test_an_item_naming_a_missing_key_is_a_spec_error() -> None:
    source = {"name": "settings", "items": [{"key": "missing", "path": "x"}]}
    with pytest.raises(SpecError, match="ConfigMap settings has no key 'missing'"):
        files_pod([{"name": "conf", "configMap": source}])


def test_a_volume_of_an_object_not_in_the_render_is_a_spec_error() -> None:
    with pytest.raises(SpecError, match=r"^Deployment web volume admin: Secret 'grafana-admin'"):
        files_pod([{"name": "admin", "secret": {"secretName": "grafana-admin"}}])


def test_volumes_of_other_kinds_are_refused() -> None:
    volume = {"name": "data", "persistentVolumeClaim": {"claimName": "data"}}
    with pytest.raises(SpecError, match="only emptyDir, configMap, secret and projected volumes"):
        files_pod([volume])


def test_an_empty_dir_without_a_size() -> None:
    (volume,) = files_pod([{"name": "scratch", "emptyDir": {}}]).volumes
    assert volume == spec.Volume("scratch", "emptyDir", None)


def environment_of(container: dict[str, Any]) -> dict[str, str]:
    pod = files_pod([], container)
    manifests = Manifests([CONFIG_MAP, PLAIN, SECRET])
    return environment(pod.containers[0], Downward(pod, "10.88.0.9", "node-a"), manifests)


def test_env_from_config_maps_and_secrets_with_a_prefix() -> None:
    env = environment_of(
        {
            "envFrom": [
                {"configMapRef": {"name": "plain"}, "prefix": "CM_"},
                {"secretRef": {"name": "credentials"}},
            ],
            "env": [{"name": "TOKEN", "value": "from env"}],  # env wins over envFrom
        }
    )
    assert env == {
        "CM_LEVEL": "debug",
        "CM_config.yaml": "a: 1\n",
        "password": "s3cret\n",
        "TOKEN": "from env",
        "user": "admin",
    }


def test_env_from_a_config_map_leaves_out_its_binary_data() -> None:
    env = environment_of({"envFrom": [{"configMapRef": {"name": "settings"}}]})
    assert env == {"LEVEL": "debug", "config.yaml": "a: 1\n"}


def test_env_from_key_refs_and_the_downward_api_in_order() -> None:
    env = environment_of(
        {
            "resources": {"limits": {"cpu": "1500m", "memory": "256Mi"}},
            "env": [
                {
                    "name": "LEVEL",
                    "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "LEVEL"}},
                },
                {
                    "name": "PASSWORD",
                    "valueFrom": {"secretKeyRef": {"name": "credentials", "key": "password"}},
                },
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {
                    "name": "TEAM",
                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['team']"}},
                },
                {"name": "CPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
                {
                    "name": "MEM_MI",
                    "valueFrom": {
                        "resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}
                    },
                },
                {"name": "URL", "value": "http://$(IP):8080/$(LEVEL)/$(LATER)"},
                {"name": "LATER", "value": "x"},
            ],
        }
    )
    assert env == {
        "LEVEL": "debug",
        "PASSWORD": "s3cret\n",
        "IP": "10.88.0.9",
        "NODE": "node-a",
        "APP": "web",
        "TEAM": "ml",
        "CPUS": "2",  # rounded up to whole cores, as the kubelet does
        "MEM_MI": "256",
        "URL": "http://10.88.0.9:8080/debug/$(LATER)",  # only what came before expands
        "LATER": "x",
    }


def test_a_key_ref_to_a_missing_key_is_a_spec_error() -> None:
    ref = {"secretKeyRef": {"name": "credentials", "key": "nope"}}
    with pytest.raises(SpecError, match="Secret credentials has no key nope"):
        environment_of({"env": [{"name": "X", "valueFrom": ref}]})


def test_an_unknown_field_ref_is_a_spec_error() -> None:
    ref = {"fieldRef": {"fieldPath": "status.phase"}}
    with pytest.raises(SpecError, match=r"fieldRef 'status\.phase' is not one the runner knows"):
        environment_of({"env": [{"name": "X", "valueFrom": ref}]})


def test_pods_are_replicas_of_one_template() -> None:
    pod = files_pod([])
    assert dataclasses.replace(pod, index=3).name == "web-3"
    assert pod.weight == "1"
    weighted = dataclasses.replace(pod, annotations={spec.WEIGHT_ANNOTATION: "4"})
    assert weighted.weight == "4"


def test_optional_references_to_what_is_not_rendered_are_left_out_as_the_kubelet_does() -> None:
    # components/tracing's ConfigMaps: every service reads them as optional.
    def config_map(name: str, data: dict[str, str]) -> dict[str, Any]:
        return {"kind": "ConfigMap", "metadata": {"name": name}, "data": data}

    container = {
        "name": "app",
        "image": "example/app:1",
        "envFrom": [
            {"configMapRef": {"name": "tracing", "optional": True}},
            {"configMapRef": {"name": "base"}},
        ],
        "env": [
            {"name": "TEMPO_URL", "valueFrom": {"configMapKeyRef": {
                "name": "tracing-backend", "key": "query_url", "optional": True}}},
            {"name": "MISSING_KEY", "valueFrom": {"configMapKeyRef": {
                "name": "base", "key": "nope", "optional": True}}},
        ],
    }  # fmt: skip
    volume = {"name": "datasources", "projected": {"sources": [
        {"configMap": {"name": "base"}},
        {"configMap": {"name": "grafana-datasource-tempo", "optional": True}},
    ]}}  # fmt: skip
    deployment = {
        "kind": "Deployment",
        "metadata": {"name": "app"},
        "spec": {"template": {"metadata": {"labels": {"app": "app"}},
                              "spec": {"containers": [container], "volumes": [volume]}}},
    }  # fmt: skip
    manifests = Manifests([deployment, config_map("base", {"A": "1", "prometheus.yml": "x"})])
    pod = manifests.pod("app", 0)
    env = environment(pod.containers[0], Downward(pod, "10.88.0.7"), manifests)
    assert env == {"A": "1", "prometheus.yml": "x"}  # nothing of the absent or the missing key
    [files] = [v for v in pod.volumes if v.name == "datasources"]
    assert set(files.files) == {"A", "prometheus.yml"}
    # With the optional ones rendered, both are read, the projected volume's files merged.
    traced = Manifests([
        deployment, config_map("base", {"A": "1"}), config_map("tracing", {"OTEL": "on"}),
        config_map("tracing-backend", {"query_url": "http://tempo"}),
        config_map("grafana-datasource-tempo", {"tempo.yml": "t"}),
    ])  # fmt: skip
    pod = traced.pod("app", 0)
    env = environment(pod.containers[0], Downward(pod, "10.88.0.7"), traced)
    assert env == {"OTEL": "on", "A": "1", "TEMPO_URL": "http://tempo"}
    [files] = [v for v in pod.volumes if v.name == "datasources"]
    assert set(files.files) == {"A", "tempo.yml"}
    # What is not optional still must be there.
    with pytest.raises(SpecError, match="ConfigMap 'base' is not in the render"):
        Manifests([deployment]).pod("app", 0)
