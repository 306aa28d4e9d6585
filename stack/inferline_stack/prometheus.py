"""Prometheus in the local stack: its configuration, and one target file per running process.

The stack renders ``grafana/prometheus/prometheus.yml`` into ``<run_dir>/prometheus/`` (the
rule files made absolute, the intervals from the stack's configuration) and keeps
``<run_dir>/prometheus/targets/<job>-<process>.json`` in step with what runs: written when a
process starts, removed when it stops. Prometheus watches that folder, so a replica that
``make scale`` adds is scraped within one interval, with no restart. Each target carries the
labels ``service`` and ``replica`` that the dashboards and rules group by.

Prometheus is optional: without the binary (Debian's ``prometheus`` package) the stack runs all
the same and says so.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from inferline_stack import health
from inferline_stack.config import PREPROCESS, TRITON, StackConfig
from inferline_stack.services import ENVOY, HOST, Service, run_path

PROMETHEUS = "prometheus"
INSTALL_HINT = "apt-get install prometheus (Debian's package; it brings promtool too)"


def binary() -> str | None:
    """The ``prometheus`` on PATH, or None."""
    return shutil.which("prometheus")


def folder(config: StackConfig) -> Path:
    return run_path(config, PROMETHEUS)


def render(config: StackConfig) -> dict[str, Any]:
    """The repository's configuration for this stack: rule files absolute (relative to the
    source file), target files relative to the rendered one, the stack's intervals."""
    source = Path(config.prometheus_config).resolve()
    rendered: dict[str, Any] = yaml.safe_load(source.read_text(encoding="utf-8"))
    interval = f"{round(config.scrape_interval_s * 1000)}ms"  # Prometheus: whole units only
    rendered.setdefault("global", {}).update(scrape_interval=interval, evaluation_interval=interval)
    rendered["rule_files"] = [
        str((source.parent / rule).resolve()) for rule in rendered.get("rule_files") or []
    ]
    return rendered


def job(service: Service) -> str:
    """The scrape job a process belongs to (see grafana/prometheus/prometheus.yml)."""
    if service.cluster == TRITON:
        return "triton"
    if service.name in (ENVOY, PROMETHEUS):
        return service.name
    return "inferline"


def target_group(service: Service) -> dict[str, Any]:
    """``service``'s file_sd entry: its metrics address, labelled by service and replica."""
    address = urlsplit(service.metrics).netloc
    kind = service.cluster or service.name  # a replica's cluster is its service
    return {"targets": [address], "labels": {"service": kind, "replica": service.name}}


def sync_targets(config: StackConfig, running: Iterable[Service]) -> None:
    """Make the target files say exactly ``running`` (each file written atomically)."""
    targets = folder(config) / "targets"
    targets.mkdir(parents=True, exist_ok=True)
    wanted = {f"{job(s)}-{s.name}.json": [target_group(s)] for s in running if s.metrics}
    for s in running:  # in-pod: the preprocess beside a Triton, a preprocess of its own
        if s.pod_metrics:
            address = urlsplit(s.pod_metrics).netloc
            labels = {"service": PREPROCESS, "replica": f"{s.name}-{PREPROCESS}"}
            wanted[f"inferline-{s.name}-{PREPROCESS}.json"] = [
                {"targets": [address], "labels": labels}
            ]
    for name, groups in wanted.items():
        path = targets / name
        text = json.dumps(groups, indent=2) + "\n"
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", dir=targets)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        Path(tmp).replace(path)
    for stale in targets.glob("*.json"):
        if stale.name not in wanted:
            stale.unlink(missing_ok=True)


def ready(url: str, timeout: float = 2.0) -> bool:
    """Prometheus answers ``/-/ready`` with 200."""
    return health.http_ok(f"{url}/-/ready", timeout)


def service(config: StackConfig) -> Service:
    """Prometheus on loopback, its data and rendered configuration under the run directory."""
    base = folder(config).resolve()
    url = config.prometheus_url
    rendered = yaml.safe_dump(render(config), sort_keys=False)
    return Service(
        name=PROMETHEUS,
        argv=[
            binary() or PROMETHEUS,
            f"--config.file={base / 'prometheus.yml'}",
            f"--storage.tsdb.path={base / 'data'}",
            "--storage.tsdb.retention.time=2d",
            "--enable-feature=exemplar-storage",  # a slow bucket's trace (inferline.metrics)
            f"--web.listen-address={HOST}:{config.prometheus_port}",
            "--log.level=warn",
        ],
        address=url,
        check=lambda: ready(url),
        metrics=f"{url}/metrics",
        inputs=rendered,
    )


def write_config(config: StackConfig, prometheus: Service) -> Path:
    """Write the rendered configuration Prometheus is started with."""
    path = folder(config) / "prometheus.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(prometheus.inputs, encoding="utf-8")
    return path
