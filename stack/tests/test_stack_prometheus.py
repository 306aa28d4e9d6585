"""Prometheus in the local stack: the rendered configuration and the target files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from inferline_stack import envoy as stack_envoy
from inferline_stack import prometheus, services
from inferline_stack.config import StackConfig
from inferline_testing.prometheus import tool

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "grafana" / "prometheus" / "prometheus.yml"


def stack_config(tmp_path: Path, scrape_interval_s: float = 5.0) -> StackConfig:
    return StackConfig(
        run_dir=str(tmp_path), prometheus_config=str(SOURCE), scrape_interval_s=scrape_interval_s
    )


def test_the_rendered_configuration_is_valid_and_finds_its_rules(tmp_path: Path) -> None:
    config = stack_config(tmp_path, scrape_interval_s=1.5)
    rendered = prometheus.render(config)
    assert rendered["global"]["scrape_interval"] == "1500ms"
    assert rendered["global"]["evaluation_interval"] == "1500ms"
    rules = [Path(rule) for rule in rendered["rule_files"]]
    assert rules and all(rule.is_absolute() and rule.is_file() for rule in rules)
    jobs = {job["job_name"] for job in rendered["scrape_configs"]}
    assert jobs == {"inferline", "triton", "envoy", "prometheus"}
    path = prometheus.write_config(config, prometheus.service(config))
    check = subprocess.run(
        [tool(), "check", "config", str(path)], capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_targets_follow_what_runs(tmp_path: Path) -> None:
    config = stack_config(tmp_path)
    triton0, triton1 = (services.replica(config, "triton", i) for i in (0, 1))
    middleman = services.replica(config, "middleman", 0)
    running = [services.eds(config), stack_envoy.service(config), triton0, triton1, middleman]
    prometheus.sync_targets(config, running)
    targets = tmp_path / "prometheus" / "targets"
    files = {path.name: json.loads(path.read_text()) for path in targets.glob("*.json")}
    assert set(files) == {
        "inferline-eds.json", "envoy-envoy.json", "triton-triton-0.json",
        "triton-triton-1.json", "inferline-middleman-0.json",
        # in-pod (the default): the preprocess beside each Triton, scraped as a preprocess
        "inferline-triton-0-preprocess.json", "inferline-triton-1-preprocess.json",
    }  # fmt: skip
    assert files["inferline-triton-1-preprocess.json"] == [
        {
            "targets": [f"127.0.0.1:{config.pod_metrics_port + 10}"],
            "labels": {"service": "preprocess", "replica": "triton-1-preprocess"},
        }
    ]
    (group,) = files["triton-triton-1.json"]
    assert group == {
        "targets": [f"127.0.0.1:{config.triton_metrics_port + 10}"],
        "labels": {"service": "triton", "replica": "triton-1"},
    }
    (envoy,) = files["envoy-envoy.json"]
    assert envoy["targets"] == [f"127.0.0.1:{config.envoy_admin_port}"]  # job envoy: its path
    assert files["inferline-middleman-0.json"][0]["labels"]["service"] == "middleman"

    unchanged = (targets / "triton-triton-0.json").stat().st_mtime_ns
    prometheus.sync_targets(config, [services.eds(config), stack_envoy.service(config), triton0])
    assert not (targets / "triton-triton-1.json").exists()  # a drained replica leaves
    assert not (targets / "inferline-triton-1-preprocess.json").exists()  # with its pod
    assert not (targets / "inferline-middleman-0.json").exists()
    assert (targets / "triton-triton-0.json").stat().st_mtime_ns == unchanged  # not rewritten
