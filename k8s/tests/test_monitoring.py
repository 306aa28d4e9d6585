"""Monitoring and autoscaling as rendered: one set of rules and dashboards, a Prometheus
configuration that gives every target the jobs and labels the dashboards and rules use, and an
HPA chain (scrape labels → recording rule → prometheus-adapter query → HPA metric) that holds.

* the ConfigMaps hold grafana/'s rules, dashboards and provisioning files unchanged;
* ``promtool check config`` on the effective configuration (the ConfigMap's prometheus.yml plus the
  scrape files components add, as Prometheus merges them) and ``promtool check rules`` on every
  rule file Prometheus loads; ``promtool test rules`` on the autoscaling rules;
* the relabelling, evaluated here on every container port of every pod the manifests make:
  exactly the metrics ports become targets, each with its job, ``service`` and ``replica`` (and
  ``namespace`` and ``pod``), the same jobs as the local stack's configuration;
* the adapter's queries, with its templates filled in as it fills them for an HPA, evaluated by
  ``promtool test rules`` on series labelled as the scrape configuration labels them;
* the HPAs ask for metrics the adapter serves, of objects the manifests make.

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

from inferline_testing import tools
from inferline_testing.prometheus import tool
from k8s.tests.manifests import (
    EVERYTHING_BY_PLACEMENT,
    K8S,
    NAMESPACE,
    ROOT,
    find,
    pod_specs,
    render,
)
from tools import monitoring_files, operator_rules

GRAFANA = ROOT / "grafana"
AUTOSCALING_RULES = K8S / "components" / "autoscaling" / "rules"
RULE_TESTS = sorted((AUTOSCALING_RULES / "tests").glob("*.yml"))


def run_promtool(*args: str, cwd: Path | None = None) -> str:
    command = [tool(), *args]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=120, check=False, cwd=cwd
    )
    output = f"{result.stdout}{result.stderr}".strip()
    assert result.returncode == 0, f"{' '.join(command)} exited {result.returncode}:\n{output}"
    return output


def configmap_data(objects: list[dict[str, Any]], name: str) -> dict[str, str]:
    data: dict[str, str] = find(objects, "ConfigMap", name)["data"]
    return data


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


def test_promtool_tests_the_autoscaling_rules() -> None:
    assert RULE_TESTS
    run_promtool("check", "rules", str(AUTOSCALING_RULES / "autoscaling.yml"))
    for test in RULE_TESTS:
        run_promtool("test", "rules", str(test))


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


# -- the HPA chain -------------------------------------------------------------------------------


def adapter_rules(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """prometheus-adapter's rules by the metric name they serve."""
    config = yaml.safe_load(configmap_data(objects, "prometheus-adapter-config")["config.yaml"])
    return {rule["name"]["as"]: rule for rule in config["rules"]}


def test_the_hpas_ask_for_what_the_adapter_serves() -> None:
    objects = render("overlays/gpu")
    served = adapter_rules(objects)
    recorded = {
        rule["record"]
        for path in (GRAFANA / "rules" / "recording.yml", AUTOSCALING_RULES / "autoscaling.yml")
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
        for rule in group["rules"]
        if "record" in rule
    }
    for name, rule in served.items():
        series = rule["seriesQuery"].split("{", 1)[0].strip("'\"")
        assert series in recorded, f"{name}: {series} is no recording rule"
        assert re.search(rule["name"]["matches"], series), name
    hpas = {o["metadata"]["name"]: o for o in objects if o["kind"] == "HorizontalPodAutoscaler"}
    assert set(hpas) == {"triton", "middleman", "batcher", "envoy"}  # in-pod: no preprocess pool
    for hpa in hpas.values():
        target = hpa["spec"]["scaleTargetRef"]
        find(objects, target["kind"], target["name"])
        for metric in hpa["spec"]["metrics"]:
            if metric["type"] == "Resource":  # CPU: every HPA but Triton's
                assert hpa["metadata"]["name"] != "triton"
                continue
            spec = metric[metric["type"].lower()]
            assert spec["metric"]["name"] in served, spec["metric"]["name"]
            if metric["type"] == "Object":
                described = spec["describedObject"]
                find(objects, described["kind"], described["name"])
                overrides = served[spec["metric"]["name"]]["resources"]["overrides"]
                assert described["kind"].lower() in {o["resource"] for o in overrides.values()}
    triton = hpas["triton"]["spec"]
    kinds = [m["type"] for m in triton["metrics"]]
    assert kinds == ["Object", "Pods"], "the batcher's queue first, then Triton's own"
    # The batcher's batches in flight follow the HPA's ceiling (about one per GPU).
    batcher = find(objects, "Deployment", "batcher")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in batcher["env"]}
    assert int(env["INFERLINE_BATCHER_MAX_INFLIGHT"]) == triton["maxReplicas"]
    # The HPAs own the replica counts.
    for name in hpas:
        assert "replicas" not in find(objects, "Deployment", name)["spec"], name


def adapter_query(rule: dict[str, Any], matchers: str, group_by: str) -> str:
    """The adapter's metricsQuery with its templates filled in, as it does for one request."""
    series = rule["seriesQuery"].split("{", 1)[0].strip("'\"")
    return str(
        rule["metricsQuery"]
        .replace("<<.Series>>", series)
        .replace("<<.LabelMatchers>>", matchers)
        .replace("<<.GroupBy>>", group_by)
    )


def test_the_adapter_queries_return_what_the_hpa_should_see(tmp_path: Path) -> None:
    """Series as the scrape configuration labels them → the recording rules → the adapter's
    queries for a Pods metric (two Triton pods) and an Object metric (the Service batcher)."""
    served = adapter_rules(render("overlays/gpu"))

    def target(job: str, pod: str, service: str) -> str:
        return (
            f'job="{job}",instance="10.0.0.1:1",service="{service}",replica="{pod}",'
            f'namespace="{NAMESPACE}",pod="{pod}"'
        )

    def series(name: str, labels: str, values: str) -> dict[str, str]:
        return {"series": f"{name}{{{labels}}}", "values": values}

    triton_a = target("triton", "triton-a", "triton") + ',model="m",version="1"'
    triton_b = target("triton", "triton-b", "triton") + ',model="m",version="1"'
    batcher = target("inferline", "batcher-a", "batcher") + ',model="m"'
    tests = {
        "rule_files": [
            str(GRAFANA / "rules" / "recording.yml"),
            str(AUTOSCALING_RULES / "autoscaling.yml"),
        ],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    # triton-a: 31 requests a sample waiting 20 ms; triton-b: 6 waiting 10 ms.
                    series("nv_inference_queue_duration_us", triton_a, "0+620000x40"),
                    series("nv_inference_request_success", triton_a, "0+31x40"),
                    series("nv_inference_queue_duration_us", triton_b, "0+60000x40"),
                    series("nv_inference_request_success", triton_b, "0+6x40"),
                    # the batcher: 4 requests a sample waiting 0.125 s.
                    series("inferline_batcher_queue_delay_seconds_sum", batcher, "0+0.5x40"),
                    series("inferline_batcher_queue_delay_seconds_count", batcher, "0+4x40"),
                ],
                "promql_expr_test": [
                    {
                        "expr": adapter_query(
                            served["inferline_triton_queue_seconds"],
                            f'namespace="{NAMESPACE}",pod=~"triton-a|triton-b"', "pod",
                        ),
                        "eval_time": "5m",
                        "exp_samples": [
                            {"labels": '{pod="triton-a"}', "value": 0.02},
                            {"labels": '{pod="triton-b"}', "value": 0.01},
                        ],
                    },
                    {
                        "expr": adapter_query(
                            served["inferline_batcher_queue_seconds"],
                            f'namespace="{NAMESPACE}",service="batcher"', "service",
                        ),
                        "eval_time": "5m",
                        "exp_samples": [{"labels": '{service="batcher"}', "value": 0.125}],
                    },
                ],
            }
        ],
    }  # fmt: skip
    path = tmp_path / "adapter_test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False), encoding="utf-8")
    run_promtool("test", "rules", str(path))
