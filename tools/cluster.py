"""make deploy / undeploy / verify-cluster: inferline on a Kubernetes cluster, through kubectl.

    python -m tools.cluster deploy --overlay gpu --registry REG --tag TAG   # render, kubectl apply
    python -m tools.cluster deploy --overlay cpu --registry REG --tag TAG --dry-run   # print it
    python -m tools.cluster undeploy --overlay gpu
    python -m tools.cluster verify
    python -m tools.cluster deploy --overlay gpu --namespace team-a …   # or any namespace

``deploy`` writes a kustomization of its own under ``build/deploy/<overlay>/`` that points at
``k8s/overlays/<overlay>`` and sets every image to ``<registry>/inferline-<name>:<tag>``, then
applies ``kubectl kustomize`` of it. In another namespace than ``inferline`` (``--namespace``,
`make deploy NAMESPACE=…`) it is the two layers of k8s/README.md's "Another namespace": one with
``namespace:`` over the overlay's ``pipeline/``, and the overlay's own components (one per
cluster, with objects in other namespaces) above it. Every command takes the same namespace.

``verify`` proves the deployment end to end, in any placement: every Deployment of the overlay
rolled out (the pipeline's first; a preprocess pool only where the placement has one); Envoy's
``triton`` cluster (its admin API, through a port-forward: the admin listens on the pod's
loopback only) holds exactly the Triton pods (in-pod: each pod's preprocess, its front door);
the demo client through the cluster's Envoy with no error; Triton scaled 1 → 2 and the new pod
taking requests, then scaled back (the HPA's floor as it was: the next deploy applies cleanly).
``deploy`` applies server-side under its own field manager, forcing conflicts: what was changed
by hand since is set back to the manifests, as ``kubectl apply`` would. Each step says what it
checks and how long it took; the first failure stops it with what was seen.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from inferline_envoy.admin import parse_clusters
from inferline_testing.ports import free_port
from tools.images import IMAGES

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "inferline"  # the manifests' own (k8s/base); --namespace for another
# A namespace's name: a DNS label (RFC 1123), as Kubernetes requires it.
NAMESPACE_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
OVERLAYS = ("gpu", "cpu")
# The pipeline's Deployments in every placement, in the order they are waited for; preprocess
# (a pool of its own only in the remote placement) and the rest (monitoring, the adapter) follow
# when the overlay has them.
DEPLOYMENTS = ("eds", "envoy", "triton", "batcher", "middleman")
ADMIN_PORT, PUBLIC_PORT = 9901, 8080
ROLLOUT_TIMEOUT_S = 900  # Triton's first start pulls a large image and loads the model
STEP_TIMEOUT_S = 180.0


# Server-side apply under one field manager. --force-conflicts: the manifests win over a field
# someone changed by hand since (kubectl edit, patch or scale, another tool), as a plain
# `kubectl apply` would, instead of failing the deploy on the conflict.
FIELD_MANAGER = "inferline-deploy"
APPLY = ("apply", "--server-side", "--force-conflicts", f"--field-manager={FIELD_MANAGER}")


class ClusterError(Exception):
    """A step failed; the message says what was expected and what was seen."""


KUSTOMIZATION = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}


def check_namespace(namespace: str) -> None:
    if not NAMESPACE_NAME.fullmatch(namespace):
        raise ClusterError(
            f"namespace {namespace!r}: a DNS label (lower-case letters, digits and '-', at most "
            "63, starting and ending with a letter or digit)"
        )


def overlay_components(overlay: str) -> list[str]:
    """The components ``k8s/overlays/<overlay>`` lists above its ``pipeline/``, as paths from
    ``k8s/``."""
    folder = ROOT / "k8s" / "overlays" / overlay
    made = yaml.safe_load((folder / "kustomization.yaml").read_text("utf-8"))
    extra = set(made) - {*KUSTOMIZATION, "resources", "components"}
    if made.get("resources") != ["pipeline"] or extra:
        raise ClusterError(f"k8s/overlays/{overlay}: expected its pipeline/ and components only")
    return [
        (folder / path).resolve().relative_to(ROOT / "k8s").as_posix()
        for path in made.get("components", [])
    ]


def kustomization(
    overlay: str, registry: str, tag: str, namespace: str = NAMESPACE
) -> dict[str, Any]:
    """The deploy-time kustomization: the overlay, with every image from ``registry``; in another
    namespace, its pipeline in that namespace (:func:`pipeline_kustomization`, in ``pipeline/``)
    and the overlay's components above it."""
    if overlay not in OVERLAYS:
        raise ClusterError(f"unknown overlay {overlay!r}: one of {', '.join(OVERLAYS)}")
    if not registry or not tag:
        raise ClusterError("REGISTRY and TAG are needed: where `make images` pushed the images")
    check_namespace(namespace)
    if namespace == NAMESPACE:
        layout: dict[str, Any] = {"resources": [f"../../../k8s/overlays/{overlay}"]}
    else:
        components = [f"../../../k8s/{path}" for path in overlay_components(overlay)]
        layout = {"resources": ["pipeline"], "components": components}
    return {
        **KUSTOMIZATION,
        **layout,
        "images": [  # k8s/CONTRACT.md: inferline/<name> is pushed as <registry>/inferline-<name>
            {
                "name": f"inferline/{image.name}",
                "newName": f"{registry.rstrip('/')}/{image.repository}",
                "newTag": tag,
            }
            for image in IMAGES
        ],
    }


def pipeline_kustomization(overlay: str, namespace: str) -> dict[str, Any]:
    """``build/deploy/<overlay>/pipeline/``: the overlay's pipeline in ``namespace``."""
    return {
        **KUSTOMIZATION,
        "namespace": namespace,
        "resources": [f"../../../../k8s/overlays/{overlay}/pipeline"],
    }


def write_kustomization(overlay: str, registry: str, tag: str, namespace: str = NAMESPACE) -> Path:
    folder = ROOT / "build" / "deploy" / overlay
    made = kustomization(overlay, registry, tag, namespace)
    header = "# Written by `make deploy` (tools/cluster.py); regenerated every time.\n"
    pipeline = folder / "pipeline"
    shutil.rmtree(pipeline, ignore_errors=True)
    if made["resources"] == ["pipeline"]:
        pipeline.mkdir(parents=True)
        text = yaml.safe_dump(pipeline_kustomization(overlay, namespace))
        (pipeline / "kustomization.yaml").write_text(header + text, "utf-8")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kustomization.yaml").write_text(header + yaml.safe_dump(made), "utf-8")
    return folder


def kubectl(*args: str, input_text: str | None = None, check: bool = True) -> str:
    """Run kubectl; its stdout. ClusterError with its stderr when it fails and ``check``."""
    binary = shutil.which("kubectl")
    if binary is None:
        raise ClusterError("kubectl is not on PATH: install it and point it at your cluster")
    result = subprocess.run(
        [binary, *args], input=input_text, capture_output=True, text=True, check=False
    )
    if check and result.returncode != 0:
        raise ClusterError(f"kubectl {' '.join(args)} failed:\n{result.stderr.strip()}")
    return result.stdout


def render(overlay: str, registry: str, tag: str, namespace: str = NAMESPACE) -> str:
    folder = write_kustomization(overlay, registry, tag, namespace)
    return kubectl("kustomize", str(folder))


def deploy(
    overlay: str, registry: str, tag: str, dry_run: bool, namespace: str = NAMESPACE
) -> None:
    manifests = render(overlay, registry, tag, namespace)
    if dry_run:
        sys.stdout.write(manifests)
        return
    objects = [o for o in yaml.safe_load_all(manifests) if o]
    refuse_taken_apis(objects)
    step(f"applying overlay {overlay!r} in namespace {namespace} ({len(objects)} objects)")
    sys.stdout.write(kubectl(*APPLY, "-f", "-", input_text=manifests))
    if any(o["kind"] == "Deployment" and o["metadata"]["name"] == "grafana" for o in objects):
        step(ensure_grafana_admin(namespace))
    step("applied: `make verify-cluster` proves it works")


def refuse_taken_apis(objects: Sequence[Mapping[str, Any]]) -> None:
    """ClusterError when an APIService the overlay registers (prometheus-adapter's
    custom.metrics.k8s.io: one per cluster) is already served by another Service: applying it
    would take the API from that adapter and break whatever scales on it."""
    for obj in objects:
        if obj["kind"] != "APIService":
            continue
        name, ours = obj["metadata"]["name"], obj["spec"]["service"]
        found = kubectl("get", "apiservice", name, "--ignore-not-found", "-o", "json")
        if not found.strip():
            continue
        theirs = json.loads(found)["spec"].get("service") or {}
        if (theirs.get("namespace"), theirs.get("name")) != (ours["namespace"], ours["name"]):
            raise ClusterError(
                f"APIService {name} is already served by "
                f"{theirs.get('namespace')}/{theirs.get('name')} (another prometheus-adapter?): "
                "deploy an overlay without components/prometheus-adapter and add its "
                "config.yaml rules to that adapter (k8s/README.md, Autoscaling)"
            )


GRAFANA_ADMIN = "grafana-admin"


def ensure_grafana_admin(namespace: str = NAMESPACE) -> str:
    """Secret grafana-admin, Grafana's admin password: generated once, kept after (a password
    of your own, put there first, is kept too). What was done, in a line."""
    found = kubectl("-n", namespace, "get", "secret", GRAFANA_ADMIN, "--ignore-not-found",
                    "-o", "name")  # fmt: skip
    read = (
        f"kubectl -n {namespace} get secret {GRAFANA_ADMIN} -o jsonpath='{{.data.password}}' "
        "| base64 -d"
    )
    if found.strip():
        return f"Grafana's admin password: Secret {GRAFANA_ADMIN}, kept (read it: {read})"
    password = secrets.token_urlsafe(24)
    kubectl("-n", namespace, "create", "secret", "generic", GRAFANA_ADMIN,
            f"--from-literal=password={password}")  # fmt: skip
    return f"Grafana's admin password: generated into Secret {GRAFANA_ADMIN} (read it: {read})"


def undeploy(overlay: str, namespace: str = NAMESPACE) -> None:
    """Delete what deploy applied; in another namespace than ``inferline``, all but that
    namespace itself (it may hold more than the pipeline)."""
    manifests = render(overlay, "unused.example", "unused", namespace)
    if namespace != NAMESPACE:
        objects = [
            o for o in yaml.safe_load_all(manifests)
            if o and (o["kind"], o["metadata"]["name"]) != ("Namespace", namespace)
        ]  # fmt: skip
        manifests = yaml.safe_dump_all(objects)
        step(f"namespace {namespace} is kept: delete it yourself where only inferline was there")
    sys.stdout.write(kubectl("delete", "--ignore-not-found", "-f", "-", input_text=manifests))


# -- verify ---------------------------------------------------------------------------------


def step(message: str) -> None:
    sys.stderr.write(f"[verify-cluster] {message}\n")
    sys.stderr.flush()


def pod_ips(pods: Mapping[str, Any]) -> dict[str, str]:
    """``kubectl get pods -o json``: {pod name: IP} of the running, ready ones."""
    found = {}
    for pod in pods.get("items", []):
        status = pod.get("status", {})
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in status.get("conditions", [])
        )
        if status.get("phase") == "Running" and ready and status.get("podIP"):
            found[pod["metadata"]["name"]] = status["podIP"]
    return found


def triton_hosts(clusters: Mapping[str, Any]) -> dict[str, int]:
    """Envoy's ``/clusters?format=json``: the triton cluster's host addresses, and the requests
    each has served."""
    return {h.address: h.rq_total for h in parse_clusters(clusters).get("triton", [])}


@contextlib.contextmanager
def port_forward(target: str, remote: int, namespace: str = NAMESPACE) -> Iterator[int]:
    """``kubectl port-forward`` to ``target``'s ``remote`` port; yields the local port."""
    local = free_port()
    args = ["kubectl", "-n", namespace, "port-forward", target, f"{local}:{remote}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait(lambda: connectable(local) or proc.poll() is not None, f"port-forward to {target}")
        if proc.poll() is not None:
            why = proc.stderr.read() if proc.stderr else ""
            raise ClusterError(f"{' '.join(args)} exited: {why}")
        yield local
    finally:
        proc.terminate()
        proc.wait(10)


def connectable(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait(check: Callable[[], bool], what: str, timeout_s: float = STEP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise ClusterError(f"{what}: not after {timeout_s:g} s")
        time.sleep(1.0)


def admin_clusters(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/clusters?format=json", timeout=5) as r:
        return dict(json.load(r))


def triton_pods(namespace: str = NAMESPACE) -> dict[str, str]:
    selector = "app.kubernetes.io/name=triton"
    return pod_ips(
        json.loads(kubectl("-n", namespace, "get", "pods", "-l", selector, "-o", "json"))
    )


def demo(port: int, count: int) -> dict[str, Any]:
    """The demo client through the cluster's Envoy; its JSON summary."""
    argv = [sys.executable, "-m", "demo_client", "load", "--target", f"127.0.0.1:{port}",
            "--json", "--count", str(count), "--concurrency", "8", "--wait", "60"]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ClusterError(f"the demo client failed:\n{result.stderr.strip()[-2000:]}")
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


@contextlib.contextmanager
def triton_scaled(replicas: int, namespace: str = NAMESPACE) -> Iterator[None]:
    """Triton at ``replicas`` ready pods for the block, then set back as it was, also when the
    block fails: with the autoscaling component its HPA's floor is raised (it would scale a
    manual change back down), else the Deployment is scaled."""
    hpa = kubectl("-n", namespace, "get", "hpa", "triton", "--ignore-not-found", "-o", "name")
    if hpa.strip():
        field, what = "{.spec.minReplicas}", "HorizontalPodAutoscaler triton: minReplicas"
        before = int(kubectl("-n", namespace, "get", "hpa", "triton", "-o", f"jsonpath={field}"))

        def set_to(count: int) -> None:
            patch = json.dumps({"spec": {"minReplicas": count}})
            kubectl("-n", namespace, "patch", "hpa", "triton", "--type", "merge", "-p", patch)
    else:
        field, what = "{.spec.replicas}", "Deployment triton: replicas"
        before = int(
            kubectl("-n", namespace, "get", "deployment", "triton", "-o", f"jsonpath={field}")
        )

        def set_to(count: int) -> None:
            kubectl("-n", namespace, "scale", "deployment/triton", f"--replicas={count}")

    set_to(replicas)
    step(f"{what} {before} → {replicas}")
    try:
        ready = f"{replicas} ready Triton pods"
        wait(lambda: len(triton_pods(namespace)) >= replicas, ready, 600.0)
        yield
    finally:
        set_to(before)
        step(f"{what} back to {before}")


def rollout_order(found: Sequence[str], namespace: str = NAMESPACE) -> list[str]:
    """The Deployments to wait for: the pipeline's first (each must be there), then the others
    the overlay made (preprocess in the remote placement, monitoring, …) by name."""
    missing = [name for name in DEPLOYMENTS if name not in found]
    if missing:
        raise ClusterError(
            f"no deployment {', '.join(missing)} in namespace {namespace} (found: "
            f"{', '.join(sorted(found)) or 'none'}): `make deploy` first"
        )
    return [*DEPLOYMENTS, *sorted(set(found) - set(DEPLOYMENTS))]


def deployments(namespace: str = NAMESPACE) -> list[str]:
    """The names of inferline's Deployments in the namespace."""
    listed = kubectl("-n", namespace, "get", "deployments", "-l",
                     "app.kubernetes.io/part-of=inferline", "-o", "name")  # fmt: skip
    return [line.split("/", 1)[-1] for line in listed.split()]


def verify(requests: int, namespace: str = NAMESPACE) -> None:
    start = time.monotonic()
    for name in rollout_order(deployments(namespace), namespace):
        step(f"rollout of deployment/{name} …")
        kubectl("-n", namespace, "rollout", "status", f"deployment/{name}",
                f"--timeout={ROLLOUT_TIMEOUT_S}s")  # fmt: skip
    with (
        port_forward("deployment/envoy", ADMIN_PORT, namespace) as admin,
        port_forward("service/envoy", PUBLIC_PORT, namespace) as public,
    ):
        pods = triton_pods(namespace)
        step(f"Triton pods: {pods}; waiting until Envoy's triton cluster holds exactly them")
        wait(
            lambda: set(triton_hosts(admin_clusters(admin))) == set(pods.values()),
            "Envoy's triton cluster = the Triton pods",
        )
        summary = demo(public, requests)
        errors = summary.get("errors", 0)
        step(f"demo client: {summary.get('images_per_s')} images/s, {errors} errors")
        if errors:
            raise ClusterError(f"the demo client saw errors: {summary.get('errors_by_code')}")
        step(f"scaling Triton {len(pods)} → {len(pods) + 1}")
        with triton_scaled(len(pods) + 1, namespace):
            new = set(triton_pods(namespace).values()) - set(pods.values())
            if not new:
                raise ClusterError("Triton scaled up but no new ready pod IP")
            step(f"new Triton pod {sorted(new)}: waiting until Envoy has it, then sends it work")
            wait(lambda: new <= set(triton_hosts(admin_clusters(admin))), "the new pod in Envoy")
            summary = demo(public, requests)
            served = triton_hosts(admin_clusters(admin))
            if summary.get("errors", 0) or not all(served.get(ip, 0) > 0 for ip in new):
                raise ClusterError(f"after the scale-up: {summary.get('errors_by_code')}, {served}")
            step(f"requests per Triton pod: {served}")
    step(f"verified in {time.monotonic() - start:.0f} s")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {name: sub.add_parser(name) for name in ("deploy", "undeploy", "verify")}
    for command, one in commands.items():
        one.add_argument("--namespace", default=NAMESPACE, help="the pipeline's namespace")
        if command == "verify":
            continue
        one.add_argument("--overlay", choices=OVERLAYS, default="gpu")
        if command == "deploy":
            one.add_argument("--registry", default="")
            one.add_argument("--tag", default="")
            one.add_argument("--dry-run", action="store_true", help="print, apply nothing")
    check = commands["verify"]
    check.add_argument("--requests", type=int, default=400, help="demo client requests per run")
    args = parser.parse_args(argv)
    try:
        check_namespace(args.namespace)
        if args.command == "deploy":
            deploy(args.overlay, args.registry, args.tag, args.dry_run, args.namespace)
        elif args.command == "undeploy":
            undeploy(args.overlay, args.namespace)
        else:
            verify(args.requests, args.namespace)
    except ClusterError as exc:
        sys.stderr.write(f"{args.command}: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
