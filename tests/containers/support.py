"""What the container suite's tests share: the image table and the ways to reach the pods."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import urllib.request

import yaml

from tools import images
from tools.cluster import kustomize
from tools.containers import checks
from tools.containers.engine import Engine
from tools.pods.manifests import Manifests
from tools.pods.runner import Cluster

REGISTRY = "localhost/inferline"
TAG = "test"
NAMESPACE = "inferline"
PIPELINE = kustomize.DEPLOYMENTS  # the Deployments that run here (monitoring needs a cluster)


@dataclasses.dataclass
class ImageRow:
    name: str
    built: bool = False
    size_bytes: int = 0
    build_s: float | None = None
    ready_s: float | None = None  # its slowest container's time to ready
    ready_how: str = ""  # what "ready" means for it


ROWS: dict[str, ImageRow] = {i.name: ImageRow(i.name) for i in images.IMAGES}
ROWS["demo-client"].ready_how = "a client: no probe (classifies and loads in test_pods)"
# The end-to-end run's figures (what was measured -> the figure), printed with the table.
FIGURES: dict[str, str] = {}


def reference(name: str) -> str:
    return f"{REGISTRY}/inferline-{name}:{TAG}"


def record_ready(image: str, seconds: float, how: str) -> None:
    row = ROWS.get(image)
    if row is not None and (row.ready_s is None or seconds > row.ready_s):
        row.ready_s, row.ready_how = seconds, how


def table() -> str:
    lines = [
        "| image | built | size | build (s) | seconds to ready | ready means |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in ROWS.values():
        size = checks.size_mb(row.size_bytes) if row.built else "—"
        build = f"{row.build_s:.0f}" if row.build_s is not None else "—"
        ready = f"{row.ready_s:.1f}" if row.ready_s is not None else "—"
        built = "yes" if row.built else "no"
        lines.append(f"| {row.name} | {built} | {size} | {build} | {ready} | {row.ready_how} |")
    return "\n".join(lines)


def render(namespace: str = NAMESPACE) -> Manifests:
    return Manifests(yaml.safe_load_all(kustomize.render("cpu", REGISTRY, TAG, namespace)))


def envoy_ip(pods: Cluster) -> str:
    return pods.records["envoy-0"].ip


def exec_in(engine: Engine, container: str, *argv: str) -> str:
    return engine.run("exec", container, *argv).stdout


def demo_client(engine: Engine, network: str, *argv: str, timeout: float = 180) -> str:
    """The demo client's image, run as a pod of the cluster would (its Services by name)."""
    done = engine.run(
        "run", "--rm", f"--network={network}", "--workdir=/tmp", reference("demo-client"),
        *argv, timeout=timeout,
    )  # fmt: skip
    return done.stdout


def load_summary(output: str) -> dict[str, object]:
    """The JSON object ``demo_client load --json`` prints last."""
    summary: dict[str, object] = json.loads(output.strip().splitlines()[-1])
    return summary


def image_name(reference_: str) -> str | None:
    """``localhost/inferline/inferline-eds:test`` -> ``eds``; None for another image."""
    repository = reference_.rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return repository.removeprefix("inferline-") if repository.startswith("inferline-") else None


def record_pods(pods: Cluster) -> None:
    """Each image's time to ready, from the pods that run it (its slowest container)."""
    for record in pods.records.values():
        pod = pods.manifests.pod(record.deployment, record.index)
        for spec, container in zip(pod.containers, record.containers, strict=True):
            name = image_name(spec.image)
            probe = spec.readiness or spec.startup
            if name and container.ready_s is not None and probe is not None:
                how = {"grpc": "gRPC health", "http": "HTTP GET", "tcp": "TCP"}.get(probe.kind)
                record_ready(name, container.ready_s, f"readiness probe ({how or probe.kind})")
        for init, seconds in record.init_s.items():
            spec = next(c for c in pod.init_containers if c.name == init)
            if (name := image_name(spec.image)) and ROWS[name].ready_s is None:
                record_ready(name, seconds, f"init container {init} done")


class Load:
    """The demo client's image driving closed-loop load at the Envoy Service, in the background
    (``with Load(...) as load: …``; ``load.summary`` once the block is over)."""

    def __init__(self, engine: Engine, network: str, seconds: float, concurrency: int = 4) -> None:
        self.argv = engine.argv(
            "run", "--rm", f"--network={network}", "--workdir=/tmp", reference("demo-client"),
            "load", "--json", "--target", "envoy:8080", "--duration", str(seconds),
            "--concurrency", str(concurrency),
        )  # fmt: skip
        self.env = engine.environ()
        self.seconds = seconds
        self.summary: dict[str, object] = {}

    def __enter__(self) -> Load:
        self.process = subprocess.Popen(
            self.argv, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            out, err = self.process.communicate(timeout=self.seconds + 120)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        if not exc[0]:
            assert self.process.returncode == 0, f"demo client load failed:\n{err[-2000:]}"
            self.summary = load_summary(out)


def metric(ip: str, port: int, name: str) -> float:
    """The sum of a metric's samples on ``ip:port``'s /metrics (0 when it has none yet)."""
    with urllib.request.urlopen(f"http://{ip}:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((f"{name} ", f"{name}{{"))
    )


def summary_line(summary: dict[str, object]) -> str:
    """A load run in one line: requests, failures, images/s."""
    return (
        f"{summary['requests']} requests, {summary['errors']} failed, "
        f"{float(str(summary['images_per_s'])):.1f} images/s"
    )
