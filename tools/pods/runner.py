"""Start, scale and stop the rendered pods under podman (see :mod:`tools.pods`).

podman is the only state: every pod, container and network carries the label ``io.inferline.pods``
(the namespace), pods also their Deployment and index, so a later command (or ``down`` after a
crash) finds what an earlier one made. The runner's own files (the endpoints file, each pod's
volumes: folders, tmpfs mounts, ConfigMap and Secret files) are under its run folder,
``.run/pods`` by default.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from eds.cache import Endpoint
from eds.sources.endpoints_file import dump
from tools.containers.engine import Engine, EngineError
from tools.pods import endpoints, probes, volumes
from tools.pods.create import create_args
from tools.pods.environment import Downward, environment
from tools.pods.manifests import Manifests
from tools.pods.records import ContainerRecord, PodRecord, RunError
from tools.pods.spec import Container, Pod

LABEL = "io.inferline.pods"
DEPLOYMENT = "io.inferline.pods.deployment"
INDEX = "io.inferline.pods.index"
DEFAULT_READY_BUDGET_S = 300.0
LOG_LINES = 40


class Cluster:
    """The render's Deployments as podman pods; ``run_dir`` holds the runner's files."""

    def __init__(
        self,
        engine: Engine,
        manifests: Manifests,
        run_dir: Path,
        log: Callable[[str], None] = print,
        host_cpus: int | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        """``extra_env`` goes to every container, after its own (a diagnosis: say,
        PYTHONPROFILEIMPORTTIME, for tools.containers.weight)."""
        self.engine = engine
        self.extra_env = dict(extra_env or {})
        self.manifests = manifests
        self.run_dir = run_dir
        self.log = log
        self.host_cpus = host_cpus or os.cpu_count() or 1
        self.namespace = next(
            (
                str(d["metadata"].get("namespace", "default"))
                for d in manifests.deployments().values()
            ),
            "default",
        )
        # One network per namespace: its Services are its DNS names.
        self.network = f"inferline-pods-{self.namespace}"
        self.terminating: set[str] = set()
        self.records: dict[str, PodRecord] = {}
        self._endpoints_lock = threading.Lock()

    # --- what podman holds -----------------------------------------------------------------

    def podman(self, *args: str, timeout: float | None = 120) -> str:
        return self.engine.run(*args, timeout=timeout).stdout

    def pods(self, deployment: str | None = None) -> dict[str, tuple[str, int]]:
        """name -> (deployment, index) of the runner's pods, running or not."""
        filters = ["--filter", f"label={LABEL}={self.namespace}"]
        if deployment:
            filters += ["--filter", f"label={DEPLOYMENT}={deployment}"]
        listed = json.loads(self.podman("pod", "ps", "--format", "json", *filters) or "[]")
        return {
            p["Name"]: (p["Labels"][DEPLOYMENT], int(p["Labels"][INDEX]))
            for p in listed
            if DEPLOYMENT in (p.get("Labels") or {})
        }

    def pod_ip(self, name: str) -> str:
        """The pod's address; "" for one whose creation was cut short (no infra container yet:
        what an interrupted run leaves, which ``down`` then removes)."""
        infra = self.podman("pod", "inspect", "--format", "{{.InfraContainerID}}", name).strip()
        if not infra:
            return ""
        template = "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}"
        addresses = self.podman("inspect", "--format", template, infra).split()
        return addresses[0] if addresses else ""

    def running(self, container: str) -> bool:
        done = self.engine.run(
            "inspect", "--format", "{{.State.Running}}", container, check=False, timeout=30
        )
        return done.stdout.strip() == "true"

    def logs(self, container: str) -> str:
        done = self.engine.run("logs", "--tail", str(LOG_LINES), container, check=False)
        return (done.stdout + done.stderr).strip()

    # --- the EndpointSlice controller ------------------------------------------------------

    def endpoints_file(self) -> Path:
        return self.run_dir / "endpoints" / "endpoints.yaml"

    def refresh(self) -> None:
        """Records of the pods an earlier command started: ready while their containers run."""
        for name, (deployment, index) in self.pods().items():
            if name in self.records:
                continue
            pod = self.manifests.pod(deployment, index)
            containers = [
                ContainerRecord(c.name, c.image, ready=self.running(f"{name}-{c.name}"))
                for c in pod.containers
            ]
            self.records[name] = PodRecord(
                name, deployment, index, self.pod_ip(name), containers, grace_s=pod.grace_s
            )

    def write_endpoints(self) -> dict[str, tuple[Endpoint, ...]]:
        """The endpoints of the Services eds watches, from the pods podman runs now."""
        found = endpoints.eds_container(self.manifests)
        if found is None:
            return {}
        with self._endpoints_lock:
            members = []
            for name in self.pods():
                record = self.records.get(name)
                if record is None or not record.ip:
                    continue
                pod = self.manifests.pod(record.deployment, record.index)
                ready = all(c.ready for c in record.containers)
                state = (
                    "terminating" if name in self.terminating else "ready" if ready else "starting"
                )
                members.append((pod, record.ip, state))
            clusters = endpoints.watched_endpoints(self.manifests, found[1], members)
            endpoints.write_atomically(self.endpoints_file(), dump(clusters))
            return clusters

    # --- pods ------------------------------------------------------------------------------

    def ensure_network(self) -> None:
        listed = self.podman("network", "ls", "--format", "{{.Name}}").split()
        if self.network not in listed:
            label = f"{LABEL}={self.namespace}"
            self.podman("network", "create", "--label", label, self.network)

    def pod_dir(self, name: str) -> Path:
        return self.run_dir / "pods" / name

    def create(self, pod: Pod, container: Container, ip: str, sources: Mapping[str, str]) -> str:
        user = self.podman("image", "inspect", "--format", "{{.Config.User}}", container.image)
        env = environment(container, Downward(pod, ip), self.manifests)
        extra_env, extra_args = endpoints.overrides(
            self.manifests, pod, container, self.endpoints_file()
        )
        env |= extra_env | self.extra_env
        args = create_args(pod, container, env, user.strip(), sources, self.host_cpus)
        name = f"{pod.name}-{container.name}"
        labels = ["--label", f"{LABEL}={self.namespace}"]
        self.podman("create", *labels, *extra_args, *args)
        return name

    def start_pod(self, deployment: str, index: int) -> PodRecord:
        """Start one replica and wait until it is ready; a pod that fails to start is
        removed (with the reason raised), never left half made."""
        try:
            return self._start_pod(deployment, index)
        except BaseException:
            self.stop_pod(f"{deployment}-{index}")
            raise

    def _start_pod(self, deployment: str, index: int) -> PodRecord:
        pod = self.manifests.pod(deployment, index)
        for image in pod.images:
            if self.engine.run("image", "inspect", image, check=False).returncode != 0:
                raise RunError(
                    f"pod {pod.name}: image {image} is not here (make images, or pull it)"
                )
        aliases = [a for alias in (*pod.aliases, pod.name) for a in ("--network-alias", alias)]
        self.podman(
            "pod", "create", f"--name={pod.name}", f"--hostname={pod.name}",
            f"--network={self.network}", *aliases, "--share=ipc,net,uts",
            "--label", f"{LABEL}={self.namespace}", "--label", f"{DEPLOYMENT}={deployment}",
            "--label", f"{INDEX}={index}",
        )  # fmt: skip
        self.podman("pod", "start", pod.name)
        ip = self.pod_ip(pod.name)
        record = PodRecord(
            pod.name,
            deployment,
            index,
            ip,
            [ContainerRecord(c.name, c.image) for c in pod.containers],
            grace_s=pod.grace_s,
        )
        self.records[pod.name] = record
        sources = volumes.make(pod, self.pod_dir(pod.name))
        for init in pod.init_containers:
            name = self.create(pod, init, ip, sources)
            started = time.monotonic()
            done = self.engine.run("start", "--attach", name, check=False, timeout=600)
            code = self.podman("inspect", "--format", "{{.State.ExitCode}}", name).strip()
            if done.returncode != 0 or code != "0":
                raise RunError(
                    f"pod {pod.name}: init container {init.name} exited {code}:\n{self.logs(name)}"
                )
            record.init_s[init.name] = time.monotonic() - started
        names = [self.create(pod, c, ip, sources) for c in pod.containers]
        started = time.monotonic()
        for name in names:
            self.podman("start", name)
        self.log(f"  {pod.name} ({ip}): started {', '.join(c.name for c in pod.containers)}")
        with ThreadPoolExecutor(len(names)) as pool:
            waits = [
                pool.submit(self.wait_ready, pod, c, r, ip, started)
                for c, r in zip(pod.containers, record.containers, strict=True)
            ]
            errors = [e for w in waits if (e := w.result())]
        if errors:
            raise RunError(f"pod {pod.name}: " + "; ".join(errors))
        slowest = max((r.ready_s or 0.0) for r in record.containers)
        self.log(f"  {pod.name}: ready in {slowest:.1f} s")
        return record

    def wait_ready(
        self, pod: Pod, container: Container, record: ContainerRecord, ip: str, started: float
    ) -> str | None:
        """Wait for the container's startup then readiness probe; None, or why it failed."""
        name = f"{pod.name}-{container.name}"
        budget = (
            container.startup.budget_s if container.startup
            else container.liveness.budget_s if container.liveness
            else container.readiness.budget_s if container.readiness
            else DEFAULT_READY_BUDGET_S
        )  # fmt: skip
        record.budget_s = budget
        deadline = started + budget
        for probe in (container.startup, container.readiness):
            if probe is None:
                continue
            why = probes.wait(probe, ip, self.engine, name, deadline, lambda: self.running(name))
            if why:
                return f"container {container.name}: {probe.kind} probe: {why}\n{self.logs(name)}"
        if not self.running(name):
            return f"container {container.name} is not running:\n{self.logs(name)}"
        record.ready_s = time.monotonic() - started
        record.ready = True
        return None

    def stop_container(
        self, name: str, spec: Container, record: ContainerRecord, grace_s: float
    ) -> None:
        """The kubelet's stop: preStop, SIGTERM, and SIGKILL when the grace period is over."""
        started = time.monotonic()
        if not self.running(name):
            record.exited_before_stop = True
            record.exit_code = self.exit_code(name)
            return
        if spec.pre_stop:
            self.engine.run("exec", name, *spec.pre_stop, check=False, timeout=grace_s)
        left = max(0.0, grace_s - (time.monotonic() - started))
        self.engine.run("kill", "--signal=SIGTERM", name, check=False)
        try:
            self.engine.run("wait", "--condition=stopped", name, timeout=left or 0.1)
        except EngineError:
            record.killed = True
            self.engine.run("kill", "--signal=SIGKILL", name, check=False)
            self.engine.run("wait", "--condition=stopped", name, check=False, timeout=30)
        record.stopped_s = time.monotonic() - started
        record.exit_code = self.exit_code(name)

    def exit_code(self, container: str) -> int | None:
        done = self.engine.run("inspect", "--format", "{{.State.ExitCode}}", container, check=False)
        code = done.stdout.strip()
        return int(code) if code.lstrip("-").isdigit() else None

    def stop_pod(self, name: str) -> PodRecord | None:
        deployment, index = self.pods().get(name, (None, -1))
        self.refresh()
        record = self.records.get(name)
        if deployment is not None and record is not None:
            pod = self.manifests.pod(deployment, index)
            with ThreadPoolExecutor(max(1, len(pod.containers))) as pool:
                stops = [
                    pool.submit(self.stop_container, f"{name}-{spec.name}", spec, c, pod.grace_s)
                    for spec, c in zip(pod.containers, record.containers, strict=True)
                ]
                for stop in stops:
                    stop.result()
        self.engine.run("pod", "rm", "--force", name, check=False, timeout=120)
        volumes.unmount_under(self.pod_dir(name))
        shutil.rmtree(self.pod_dir(name), ignore_errors=True)
        self.terminating.discard(name)
        self.records.pop(name, None)
        return record

    # --- what the commands do ------------------------------------------------------------

    def up(self, deployments: Sequence[str]) -> list[PodRecord]:
        """Start each Deployment's replicas (eds first, then in the order given) and publish
        the endpoints as each becomes ready."""
        self.ensure_network()
        self.refresh()
        self.write_endpoints()
        started = []
        for deployment in deployments:
            for index in range(self.manifests.replicas(deployment)):
                name = f"{deployment}-{index}"
                if name in self.pods():
                    continue
                self.log(f"pod {name}")
                started.append(self.start_pod(deployment, index))
                self.write_endpoints()
        return started

    def scale(self, deployment: str, replicas: int) -> tuple[list[PodRecord], list[PodRecord]]:
        """(started, stopped): new pods take the lowest free indexes; the pods that go are the
        dead ones first, then the highest, each first marked terminating in the endpoints
        (DRAINING), as the EndpointSlice controller does."""
        self.refresh()
        have = self.pods(deployment)
        started: list[PodRecord] = []
        stopped: list[PodRecord] = []
        index = 0
        while len(have) + len(started) < replicas:
            if f"{deployment}-{index}" not in have:
                self.log(f"pod {deployment}-{index}")
                started.append(self.start_pod(deployment, index))
                self.write_endpoints()
            index += 1

        def keep_last(name: str) -> tuple[bool, int]:
            alive = all(c.ready for c in self.records[name].containers)
            return alive, -have[name][1]

        for name in sorted(have, key=keep_last)[: max(0, len(have) - replicas)]:
            self.terminating.add(name)
            self.write_endpoints()
            if record := self.stop_pod(name):
                stopped.append(record)
            self.write_endpoints()
        return started, stopped

    def kill(self, name: str) -> None:
        """``kill -9`` every container of a pod (a node or a process dying without warning)."""
        self.podman("pod", "kill", "--signal=SIGKILL", name)
        # The kubelet sees its containers gone at once: the pod is not ready, its endpoints
        # not ready (UNHEALTHY to Envoy).
        self.refresh()
        for container in self.records[name].containers if name in self.records else []:
            container.ready = False
        self.write_endpoints()

    def down(self) -> list[PodRecord]:
        """Stop every pod (all at once, as a namespace deletion does), then the volumes, the
        network and the runner's files: nothing of the runner's is left."""
        names = list(self.pods())
        self.terminating |= set(names)
        with contextlib.suppress(OSError):
            self.write_endpoints()
        with ThreadPoolExecutor(max(1, len(names))) as pool:
            stopped = [r for r in pool.map(self.stop_pod, names) if r]
        if self.network in self.podman("network", "ls", "--format", "{{.Name}}").split():
            self.engine.run("network", "rm", "--force", self.network, check=False)
        volumes.unmount_under(self.run_dir)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return stopped


def leftovers(engine: Engine, run_dir: Path | None = None) -> dict[str, list[str]]:
    """Every pod, container, volume and network of the runner's that podman still holds, and
    every tmpfs it mounted under ``run_dir``."""
    found = {}
    for kind, listing in (
        ("pods", ("pod", "ps", "--format", "{{.Name}}")),
        ("containers", ("ps", "--all", "--format", "{{.Names}}")),
        ("volumes", ("volume", "ls", "--format", "{{.Name}}")),
        ("networks", ("network", "ls", "--format", "{{.Name}}")),
    ):
        listed = engine.run(*listing, "--filter", f"label={LABEL}").stdout.split()
        found[kind] = listed
    found["mounts"] = [str(p) for p in volumes.mounts_under(run_dir)] if run_dir else []
    return found
