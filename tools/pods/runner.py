"""Start, scale and stop the rendered pods under podman (see :mod:`tools.pods`).

podman is the only state: every pod, container and network carries the label ``io.inferline.pods``
(the namespace), pods also their Deployment and index, so a later command (or ``down`` after a
crash) finds what an earlier one made. The runner's own files (the endpoints file, each pod's
volumes: folders, tmpfs mounts, ConfigMap and Secret files) are under its run folder,
``.run/pods`` by default.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from eds.cache import Endpoint
from eds.sources import endpointslice
from eds.sources.endpoints_file import dump
from tools.containers.engine import Engine, EngineError
from tools.pods import probes
from tools.pods.spec import (
    Container,
    Downward,
    Manifests,
    Pod,
    create_args,
    environment,
    selects,
)

LABEL = "io.inferline.pods"
DEPLOYMENT = "io.inferline.pods.deployment"
INDEX = "io.inferline.pods.index"
# eds, which would watch the API server's EndpointSlices, reads the runner's instead.
EDS_SOURCE = "INFERLINE_EDS_SOURCE"
ENDPOINTS_MOUNT = "/var/run/inferline-pods"
DEFAULT_READY_BUDGET_S = 300.0
LOG_LINES = 40


class RunError(Exception):
    """The pods cannot run as rendered; the message names the pod, container and why."""


@dataclasses.dataclass
class ContainerRecord:
    name: str
    image: str
    ready: bool = False
    ready_s: float | None = None  # from its start to its readiness probe's first success
    budget_s: float | None = None  # what its probes allow before the kubelet would act
    stopped_s: float | None = None  # from the start of its stop (preStop, SIGTERM) to its exit
    exit_code: int | None = None
    killed: bool = False  # SIGKILLed at the end of its grace period
    exited_before_stop: bool = False  # had exited (or been killed) before it was stopped


@dataclasses.dataclass
class PodRecord:
    name: str
    deployment: str
    index: int
    ip: str
    containers: list[ContainerRecord]
    init_s: dict[str, float] = dataclasses.field(default_factory=dict)
    grace_s: float = 30.0


def write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Replace ``path`` in one rename, readable by the containers' users."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    Path(tmp).chmod(mode)
    Path(tmp).replace(path)


def target_port(pod: Pod, target: object) -> int | None:
    """A Service's targetPort on ``pod``: a number, or the first container port of that name."""
    if isinstance(target, int) or str(target).isdigit():
        return int(str(target))
    return next((c.ports[str(target)] for c in pod.containers if str(target) in c.ports), None)


def endpoint_slice(
    service: Mapping[str, Any], pods: Iterable[tuple[Pod, str, str]]
) -> dict[str, Any]:
    """The EndpointSlice the controller would write for ``service`` and its pods, each given as
    (pod, IP, state: ready, starting or terminating)."""
    name = service["metadata"]["name"]
    members = list(pods)
    ports = []
    for port in service["spec"].get("ports") or []:
        target = port.get("targetPort", port["port"])
        number = next((n for p, _, _ in members if (n := target_port(p, target))), None)
        if number is not None:
            ports.append({"name": port.get("name", ""), "port": number, "protocol": "TCP"})
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "addressType": "IPv4",
        "metadata": {"name": f"{name}-pods", "labels": {endpointslice.SERVICE_LABEL: name}},
        "ports": ports,
        "endpoints": [
            {
                "addresses": [ip],
                "conditions": {
                    "ready": state == "ready",
                    "serving": state in ("ready", "terminating"),
                    "terminating": state == "terminating",
                },
                "targetRef": {"kind": "Pod", "name": pod.name, "uid": pod.uid},
            }
            for pod, ip, state in members
        ],
    }


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

    def eds_container(self) -> tuple[str, Mapping[str, Any]] | None:
        """(Deployment, container spec) of eds: the container whose env names its source."""
        for name, deployment in self.manifests.deployments().items():
            for spec in deployment["spec"]["template"]["spec"]["containers"]:
                if any(e.get("name") == EDS_SOURCE for e in spec.get("env") or []):
                    return name, spec
        return None

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
        found = self.eds_container()
        if found is None:
            return {}
        env = {str(e["name"]): str(e.get("value", "")) for e in found[1].get("env") or []}
        watched = [s.strip() for s in env.get("INFERLINE_EDS_SERVICES", "").split(",") if s.strip()]
        port_name = env.get("INFERLINE_EDS_PORT_NAME", "grpc")
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
            services = self.manifests.services()
            clusters: dict[str, tuple[Endpoint, ...]] = {}
            for service in watched:
                if service not in services:
                    clusters[service] = ()
                    continue
                selector = services[service]["spec"].get("selector") or {}
                chosen = [m for m in members if selects(selector, m[0].labels)]
                if not chosen:
                    clusters[service] = ()
                    continue
                weights = {
                    p.uid: endpointslice.parse_weight(p.weight, p.name) for p, _, _ in chosen
                }
                slice_ = endpoint_slice(services[service], chosen)
                clusters[service] = endpointslice.endpoints([slice_], port_name, weights)
            write_atomically(self.endpoints_file(), dump(clusters))
            return clusters

    # --- pods ------------------------------------------------------------------------------

    def ensure_network(self) -> None:
        listed = self.podman("network", "ls", "--format", "{{.Name}}").split()
        if self.network not in listed:
            label = f"{LABEL}={self.namespace}"
            self.podman("network", "create", "--label", label, self.network)

    def overrides(self, pod: Pod, container: Container) -> tuple[dict[str, str], list[str]]:
        """What the runner changes: eds reads the runner's endpoints file, not the API server."""
        found = self.eds_container()
        if found is None or found[0] != pod.deployment or found[1]["name"] != container.name:
            return {}, []
        env = {
            EDS_SOURCE: "file",
            "INFERLINE_EDS_ENDPOINTS_FILE": f"{ENDPOINTS_MOUNT}/{self.endpoints_file().name}",
        }
        folder = self.endpoints_file().parent
        return env, [f"--mount=type=bind,source={folder},destination={ENDPOINTS_MOUNT},ro=true"]

    def volumes(self, pod: Pod) -> dict[str, str]:
        """Make the pod's volumes as the kubelet does, each a folder of this machine that its
        containers bind-mount: an emptyDir world-writable (0777), ``medium: Memory`` a tmpfs
        mounted there, a configMap or secret its files (group-readable by ``fsGroup``).
        (podman's named volumes take the mode of the image's folder they are mounted on: a
        /dev/shm of 0755 in the image would make the pod's shared one unwritable.)"""
        sources = {}
        for volume in pod.volumes:
            folder = self.pod_dir(pod.name) / volume.name
            unmount_under(folder)
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            sources[volume.name] = str(folder)
            if volume.kind == "emptyDir":
                folder.chmod(0o777)
            elif volume.kind == "memory":
                size = f",size={volume.size_bytes}" if volume.size_bytes else ""
                options = f"mode=0777,nosuid,nodev{size}"
                done = subprocess.run(
                    ["mount", "-t", "tmpfs", "-o", options, "inferline-pods", str(folder)],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if done.returncode != 0:
                    raise RunError(
                        f"pod {pod.name}: volume {volume.name} (emptyDir, medium Memory) needs a "
                        f"tmpfs, and mount failed: {done.stderr.strip()} (run as root)"
                    )
            else:
                group = pod.security.get("fsGroup")
                for path, (content, mode) in volume.files.items():
                    target = folder / path
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(content)
                    if group is not None:
                        os.chown(target, 0, int(group))
                    target.chmod(mode | (0o040 if group is not None else 0))
        return sources

    def pod_dir(self, name: str) -> Path:
        return self.run_dir / "pods" / name

    def create(self, pod: Pod, container: Container, ip: str, sources: Mapping[str, str]) -> str:
        user = self.podman("image", "inspect", "--format", "{{.Config.User}}", container.image)
        env = environment(container, Downward(pod, ip), self.manifests)
        extra_env, extra_args = self.overrides(pod, container)
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
        sources = self.volumes(pod)
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
        unmount_under(self.pod_dir(name))
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
        unmount_under(self.run_dir)
        shutil.rmtree(self.run_dir, ignore_errors=True)
        return stopped


def mounts_under(folder: Path) -> list[Path]:
    """The mount points at or under ``folder`` (from /proc/self/mounts), deepest first."""
    try:
        table = Path("/proc/self/mounts").read_text("utf-8")
    except OSError:
        return []
    root = folder.resolve()
    found = []
    for line in table.splitlines():
        point = Path(line.split()[1].replace("\\040", " "))
        if point == root or root in point.parents:
            found.append(point)
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def unmount_under(folder: Path) -> None:
    for point in mounts_under(folder):
        subprocess.run(["umount", str(point)], capture_output=True, check=False)


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
    found["mounts"] = [str(p) for p in mounts_under(run_dir)] if run_dir else []
    return found
