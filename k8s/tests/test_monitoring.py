"""Monitoring as rendered: one set of rules and dashboards, and what shows and sends them.

* the ConfigMaps hold grafana/'s rules, dashboards and provisioning files unchanged, and the
  components' copies of them are grafana/'s;
* Grafana mounts them where its provisioning files expect them, and wants a sign-in;
* Prometheus sends its alerts to the Alertmanager, whose configuration amtool accepts;
* components/monitoring-operator ships the dashboards to kube-prometheus-stack's Grafana, and
  its rules are generated from the rule files.

The Prometheus configuration: test_prometheus_config.py; the HPA chain: test_autoscaling.py.
amtool (Debian's prometheus-alertmanager) is needed for the Alertmanager's part: it skips without
it unless INFERLINE_REQUIRE_TOOLS=1, where it fails.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferline_testing import tools
from k8s.tests.manifests import K8S, NAMESPACE, find, render
from k8s.tests.monitoring import AUTOSCALING_RULES, GRAFANA, configmap_data
from tools import monitoring_files, operator_rules

# -- one set of rules and dashboards ---------------------------------------------------------


@pytest.mark.parametrize("overlay", ["gpu", "cpu"])
def test_the_configmaps_hold_grafanas_files_unchanged(overlay: str) -> None:
    objects = render(f"overlays/{overlay}")

    def files(folder: Path, pattern: str) -> dict[str, str]:
        return {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob(pattern))}

    rules = configmap_data(objects, "prometheus-rules")
    assert rules == {
        **files(GRAFANA / "rules", "*.yml"),
        "autoscaling.yml": (AUTOSCALING_RULES / "autoscaling.yml").read_text(encoding="utf-8"),
    }
    assert configmap_data(objects, "grafana-dashboards") == files(GRAFANA / "dashboards", "*.json")
    provisioning = GRAFANA / "provisioning"
    assert configmap_data(objects, "grafana-datasources") == files(
        provisioning / "datasources", "*.yml"
    )
    assert configmap_data(objects, "grafana-dashboard-providers") == files(
        provisioning / "dashboards", "*.yml"
    )


def test_grafana_mounts_what_its_provisioning_files_expect() -> None:
    objects = render("overlays/gpu")
    grafana = find(objects, "Deployment", "grafana")["spec"]["template"]["spec"]
    [container] = grafana["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {  # a volume's ConfigMaps: its own, or a projected volume's
        v["name"]: [v["configMap"]["name"]] if "configMap" in v
        else [s["configMap"]["name"] for s in v.get("projected", {}).get("sources", [])
              if "configMap" in s]
        for v in grafana["volumes"]
    }  # fmt: skip
    by_configmap = {c: path for name, path in mounts.items() for c in volumes.get(name, [])}
    providers = yaml.safe_load(
        configmap_data(objects, "grafana-dashboard-providers")["inferline.yml"]
    )
    dashboards = find(objects, "ConfigMap", "grafana-dashboards")["metadata"]["name"]
    assert by_configmap[dashboards] == providers["providers"][0]["options"]["path"]
    datasources = find(objects, "ConfigMap", "grafana-datasources")["metadata"]["name"]
    assert by_configmap[datasources] == "/etc/grafana/provisioning/datasources"
    # components/tracing's Tempo data source, beside it when that component is there
    assert by_configmap["grafana-datasource-tempo"] == "/etc/grafana/provisioning/datasources"
    env = {e["name"]: e.get("value") for e in container["env"]}
    service = find(objects, "Service", "prometheus")
    port = service["spec"]["ports"][0]["port"]
    assert service["metadata"]["namespace"] == NAMESPACE == grafana_namespace(objects)
    assert env["PROMETHEUS_URL"] == f"http://prometheus:{port}"  # in Grafana's own namespace


def grafana_namespace(objects: list[dict[str, Any]]) -> str:
    return str(find(objects, "Deployment", "grafana")["metadata"]["namespace"])


def test_grafana_wants_a_sign_in_with_the_generated_password_and_lets_few_reach_it() -> None:
    objects = render("everything")
    grafana = find(objects, "Deployment", "grafana")["spec"]["template"]["spec"]
    [container] = grafana["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false" and env["GF_USERS_ALLOW_SIGN_UP"] == "false"
    assert "GF_SECURITY_ADMIN_PASSWORD" not in env  # never a literal in the manifest
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    [admin] = [v for v in grafana["volumes"] if v["name"] == "admin"]
    assert admin["secret"]["secretName"] == "grafana-admin"  # what `make deploy` generates
    assert "optional" not in admin["secret"]
    [item] = admin["secret"]["items"]
    assert env["GF_SECURITY_ADMIN_PASSWORD__FILE"] == f"{mounts['admin']}/{item['path']}"
    policy = find(objects, "NetworkPolicy", "grafana")["spec"]
    [rule] = policy["ingress"]
    assert rule["from"] == [
        {"namespaceSelector": {"matchLabels": {"inferline.io/grafana-access": "true"}}}
    ]  # not from anywhere


def test_the_monitoring_components_files_are_grafanas() -> None:
    """Their ConfigMaps' files are copies of grafana/'s (kustomize reads nothing outside k8s/),
    and every file they read is one of them."""
    assert monitoring_files.stale() == [], "stale: run make k8s-files (or make dashboards)"
    own = {"prometheus/prometheus.yml", "alertmanager/alertmanager.yml"}  # monitoring's own
    for component, names in (
        ("monitoring", monitoring_files.FILES),
        ("monitoring-operator", monitoring_files.OPERATOR_FILES),
    ):
        path = K8S / "components" / component / "kustomization.yaml"
        kustomization = yaml.safe_load(path.read_text(encoding="utf-8"))
        read = [
            entry.split("=", 1)[-1]
            for generator in kustomization["configMapGenerator"]
            for entry in generator["files"]
        ]
        assert set(read) - own == {f"files/{name}" for name in names}, component
        assert not [path for path in read if path.startswith("..")]


def test_the_operator_component_ships_the_dashboards_to_kube_prometheus_stacks_grafana() -> None:
    """One ConfigMap with grafana/'s dashboards, labelled for the Grafana sidecar
    (grafana_dashboard: "1", folder annotation grafana_folder), its name without a hash (a
    changed dashboard replaces it rather than leaving the old one for the sidecar)."""
    [configmap] = [o for o in render("components/monitoring-operator") if o["kind"] == "ConfigMap"]
    metadata = configmap["metadata"]
    assert metadata["name"] == "inferline-grafana-dashboards"
    assert metadata["labels"]["grafana_dashboard"] == "1"
    assert metadata["annotations"]["grafana_folder"] == "inferline"
    dashboards = GRAFANA / "dashboards"
    assert configmap["data"] == {
        p.name: p.read_text(encoding="utf-8") for p in sorted(dashboards.glob("*.json"))
    }


# -- the alerts ------------------------------------------------------------------------------


def test_prometheus_sends_its_alerts_to_the_alertmanager_which_accepts_its_configuration(
    tmp_path: Path,
) -> None:
    """Prometheus's alerting block names the Alertmanager Service's port; amtool (Debian's
    prometheus-alertmanager) accepts the configuration Alertmanager is started with, which routes
    every alert to a receiver and lets a critical alert mute its service's warnings."""
    objects = render("overlays/gpu")
    config = yaml.safe_load(configmap_data(objects, "prometheus-config")["prometheus.yml"])
    [alertmanagers] = config["alerting"]["alertmanagers"]
    service = find(objects, "Service", "alertmanager")
    [port] = service["spec"]["ports"]
    assert alertmanagers["static_configs"] == [{"targets": [f"alertmanager:{port['port']}"]}]
    deployment = find(objects, "Deployment", "alertmanager")
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    assert f"--web.listen-address=:{port['port']}" in container["args"]
    text = configmap_data(objects, "alertmanager-config")["alertmanager.yml"]
    assert "--config.file=/etc/alertmanager/alertmanager.yml" in container["args"]
    (tmp_path / "alertmanager.yml").write_text(text, encoding="utf-8")
    amtool = tools.tool("amtool", "install prometheus-alertmanager (Debian) for amtool")
    checked = subprocess.run(
        [amtool, "check-config", str(tmp_path / "alertmanager.yml")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    routed = yaml.safe_load(text)
    receivers = {r["name"] for r in routed["receivers"]}
    assert routed["route"]["receiver"] in receivers
    assert all(r["receiver"] in receivers for r in routed["route"]["routes"])
    assert routed["inhibit_rules"][0]["equal"] == ["service"]


def test_the_operator_rules_are_generated_from_the_rule_files() -> None:
    committed = operator_rules.OUTPUT.read_text(encoding="utf-8")
    assert committed == operator_rules.text(), "stale: run `make k8s-files`"
