"""The Prometheus configuration as rendered gives every target the jobs and labels the
dashboards and rules use.

* ``promtool check config`` on the effective configuration (the ConfigMap's prometheus.yml plus the
  scrape files components add, as Prometheus merges them) and ``promtool check rules`` on every
  rule file Prometheus loads;
* the relabelling, evaluated here on every container port of every pod the manifests make:
  exactly the metrics ports become targets, each with its job, ``service`` and ``replica`` (and
  ``namespace`` and ``pod``), the same jobs as the local stack's configuration;
* the Operator's PodMonitors give the same jobs and labels.

promtool (Debian's prometheus package) is needed for the promtool parts: they skip without it
unless INFERLINE_REQUIRE_TOOLS=1, where they fail.
"""

from __future__ import annotations

import functools
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferline_testing.prometheus import tool
from k8s.tests.manifests import EVERYTHING_BY_PLACEMENT, NAMESPACE, find, pod_specs, render
from k8s.tests.monitoring import GRAFANA, configmap_data, run_promtool

# -- the Prometheus configuration --------------------------------------------------------------


def effective_config(objects: list[dict[str, Any]], folder: Path) -> dict[str, Any]:
    """prometheus.yml as Prometheus assembles it in the pod: its scrape_config_files' jobs
    appended (promtool 2.42 predates scrape_config_files), rule files written to ``folder``."""
    deployment = find(objects, "Deployment", "prometheus")["spec"]["template"]["spec"]
    [container] = deployment["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v["configMap"]["name"] for v in deployment["volumes"] if "configMap" in v}
    by_path = {mounts[name]: cm for name, cm in volumes.items()}
    config_file = next(
        a.split("=", 1)[1] for a in container["args"] if a.startswith("--config.file=")
    )
    config_dir, config_name = config_file.rsplit("/", 1)
    data = configmap_data(objects, by_path[config_dir].rsplit("-", 1)[0])
    config: dict[str, Any] = yaml.safe_load(data[config_name])
    for pattern in config.pop("scrape_config_files", []):
        directory, glob = pattern.rsplit("/", 1)
        assert directory == config_dir, f"{pattern}: not in the mounted configuration"
        for key in sorted(
            k for k in data if re.fullmatch(glob.replace(".", r"\.").replace("*", ".*"), k)
        ):
            config["scrape_configs"].extend(yaml.safe_load(data[key])["scrape_configs"])
    rule_files = []
    for pattern in config["rule_files"]:
        directory, glob = pattern.rsplit("/", 1)
        rules = configmap_data(objects, by_path[directory].rsplit("-", 1)[0])
        for key, text in rules.items():
            if re.fullmatch(glob.replace(".", r"\.").replace("*", ".*"), key):
                (folder / key).write_text(text, encoding="utf-8")
                rule_files.append(str(folder / key))
    config["rule_files"] = rule_files
    return config


@functools.cache
def promtool_knows_kubernetes_sd() -> bool:
    """Debian builds Prometheus without Kubernetes service discovery: its promtool rejects
    ``kubernetes_sd_configs`` as an unknown field."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "probe.yml"
        job = {"job_name": "x", "kubernetes_sd_configs": [{"role": "pod"}]}
        path.write_text(yaml.safe_dump({"scrape_configs": [job]}), encoding="utf-8")
        command = [tool(), "check", "config", str(path)]
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    return bool(result.returncode == 0)


def check_kubernetes_sd(sd: dict[str, Any]) -> None:
    """What the manifests use of kubernetes_sd_configs, where promtool cannot check it."""
    assert set(sd) <= {"role", "namespaces"}, sd
    assert sd["role"] == "pod", sd
    namespaces = sd.get("namespaces", {})
    assert set(namespaces) <= {"own_namespace", "names"}, sd
    assert isinstance(namespaces.get("own_namespace", False), bool), sd
    assert all(isinstance(n, str) for n in namespaces.get("names", [])), sd


@pytest.mark.parametrize("target", ["overlays/gpu", "overlays/cpu", *EVERYTHING_BY_PLACEMENT])
def test_promtool_checks_the_effective_configuration(target: str, tmp_path: Path) -> None:
    config = effective_config(render(target), tmp_path)
    assert len(config["rule_files"]) == 3  # recording, alerts, autoscaling
    if not promtool_knows_kubernetes_sd():
        # Everything else is checked by promtool: each job's discovery becomes an empty file
        # discovery, and its kubernetes_sd_configs is checked here.
        for job in config["scrape_configs"]:
            for sd in job.pop("kubernetes_sd_configs", []):
                check_kubernetes_sd(sd)
                job["file_sd_configs"] = [{"files": [str(tmp_path / "none-*.json")]}]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    run_promtool("check", "config", str(path))
    run_promtool("check", "rules", *config["rule_files"])


def relabel(labels: dict[str, str], configs: list[dict[str, Any]]) -> dict[str, str] | None:
    """Prometheus's relabelling (replace, keep, drop) of one target; None: dropped."""
    labels = dict(labels)
    for config in configs:
        action = config.get("action", "replace")
        value = config.get("separator", ";").join(
            labels.get(name, "") for name in config.get("source_labels", [])
        )
        match = re.fullmatch(config.get("regex", "(.*)"), value)
        if action == "keep" and not match:
            return None
        if action == "drop" and match:
            return None
        if action == "replace" and match:
            replacement = re.sub(r"\$\{?(\d+)\}?", r"\\g<\1>", config.get("replacement", "$1"))
            labels[config["target_label"]] = match.expand(replacement)
        assert action in ("replace", "keep", "drop"), action
    return {k: v for k, v in labels.items() if not k.startswith("__")}


def pod_targets(objects: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Kubernetes pod discovery's targets: one per container port of every pod."""
    targets = []
    for obj, template in pod_specs(objects):
        namespace = obj["metadata"]["namespace"]
        pod = f"{obj['metadata']['name']}-7d4b9c-x2x9q"
        for kind in ("initContainers", "containers"):
            for container in template["spec"].get(kind) or []:
                for port in container.get("ports") or []:
                    meta = {
                        "__address__": f"10.0.0.1:{port['containerPort']}",
                        "__meta_kubernetes_namespace": namespace,
                        "__meta_kubernetes_pod_name": pod,
                        "__meta_kubernetes_pod_phase": "Running",
                        "__meta_kubernetes_pod_node_name": "node-1",
                        "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                        "__meta_kubernetes_pod_container_name": container["name"],
                    }
                    for key, value in template["metadata"]["labels"].items():
                        name = re.sub(r"[^a-zA-Z0-9_]", "_", key)
                        meta[f"__meta_kubernetes_pod_label_{name}"] = value
                    targets.append(meta)
    return targets


def discovered(job: dict[str, Any], target: dict[str, str]) -> bool:
    for sd in job.get("kubernetes_sd_configs", []):
        namespaces = sd.get("namespaces", {})
        own = namespaces.get("own_namespace") and target["__meta_kubernetes_namespace"] == NAMESPACE
        if own or target["__meta_kubernetes_namespace"] in namespaces.get("names", []):
            return bool(sd["role"] == "pod")
    return False


# (the pod's app.kubernetes.io/name, the port's name) -> (job, service)
EXPECTED_JOBS = {
    ("middleman", "metrics"): ("inferline", "middleman"),
    ("preprocess", "metrics"): ("inferline", "preprocess"),  # the pool: remote
    ("triton", "prep-metrics"): ("inferline", "preprocess"),  # beside Triton: in-pod
    ("batcher", "metrics"): ("inferline", "batcher"),
    ("eds", "metrics"): ("inferline", "eds"),
    ("triton", "metrics"): ("triton", "triton"),
    ("envoy", "probe"): ("envoy", "envoy"),
    ("dcgm-exporter", "metrics"): ("dcgm", "dcgm-exporter"),
}
# What each placement's everything render has no pod port for.
ABSENT = {
    "everything": {("preprocess", "metrics")},
    "everything/remote": {("triton", "prep-metrics")},
    "everything/in-process": {("preprocess", "metrics"), ("triton", "prep-metrics")},
}


@pytest.mark.parametrize("target", EVERYTHING_BY_PLACEMENT)
def test_relabelling_gives_every_target_its_job_service_and_replica(
    target: str, tmp_path: Path
) -> None:
    objects = render(target)
    config = effective_config(objects, tmp_path)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    local = yaml.safe_load((GRAFANA / "prometheus" / "prometheus.yml").read_text(encoding="utf-8"))
    assert {job["job_name"] for job in local["scrape_configs"]} <= set(jobs), "the local jobs"
    seen = set()
    for pod_target in pod_targets(objects):
        name = pod_target["__meta_kubernetes_pod_label_app_kubernetes_io_name"]
        port = pod_target["__meta_kubernetes_pod_container_port_name"]
        kept = {
            job_name: labels
            for job_name, job in jobs.items()
            if discovered(job, pod_target)
            and (labels := relabel({"job": job_name, **pod_target}, job.get("relabel_configs", [])))
        }
        expected = EXPECTED_JOBS.get((name, port))
        if expected is None:
            assert not kept, f"{name} port {port} is scraped by {sorted(kept)}"
            continue
        job, service = expected
        assert list(kept) == [job], f"{name} port {port}: jobs {sorted(kept)}"
        labels = kept[job]
        pod = pod_target["__meta_kubernetes_pod_name"]
        assert labels["service"] == service and labels["replica"] == pod, labels
        if job == "dcgm":
            # The exporter's own pod/namespace labels (the GPU's user) are honoured instead.
            assert jobs["dcgm"]["honor_labels"] is True
            assert "pod" not in labels and "namespace" not in labels
        else:
            assert labels["namespace"] == NAMESPACE and labels["pod"] == pod, labels
        seen.add((name, port))
    never = set(EXPECTED_JOBS) - ABSENT[target] - seen
    assert not never, f"never scraped: {never}"
    assert not seen & ABSENT[target]
    envoy = jobs["envoy"]
    assert envoy["metrics_path"] == "/stats/prometheus"


def test_the_pod_monitors_give_the_same_jobs_and_labels() -> None:
    monitors = [o for o in render("components/monitoring-operator") if o["kind"] == "PodMonitor"]
    found = {}
    for monitor in monitors:
        [endpoint] = monitor["spec"]["podMetricsEndpoints"]
        relabelings = {r["targetLabel"]: r for r in endpoint["relabelings"]}
        job = relabelings["job"]["replacement"]
        names = monitor["spec"]["selector"]["matchExpressions"][0]["values"]
        service = relabelings["service"]
        for name in names:
            if service.get("sourceLabels") == [
                "__meta_kubernetes_pod_label_app_kubernetes_io_name"
            ]:
                found[(name, endpoint["port"])] = (job, name)
            else:
                assert "sourceLabels" not in service, service
                found[(name, endpoint["port"])] = (job, service["replacement"])
        assert relabelings["replica"]["sourceLabels"] == ["__meta_kubernetes_pod_name"]
        assert endpoint.get("honorLabels", False) is (job == "dcgm")
    assert found == EXPECTED_JOBS
