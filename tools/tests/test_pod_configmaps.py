"""tools.pods, pure: ConfigMaps and Secrets from small hand-made objects, as volumes (data,
binaryData, items, modes) and as environment (envFrom, key refs, beside the downward API),
optional references left out as the kubelet leaves them; a pod is one replica of its template."""

from __future__ import annotations

import base64
import dataclasses
from typing import Any

import pytest

from tools.pods import spec
from tools.pods.environment import Downward, environment
from tools.pods.manifests import Manifests
from tools.pods.spec import SpecError

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
