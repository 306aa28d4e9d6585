"""``verify``: the deployment proved end to end: rollouts, Envoy's triton cluster against the
Triton pods, the demo client, Triton scaled up by one and back."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from inferline_envoy.admin import parse_clusters
from inferline_testing.ports import free_port
from tools.cluster import kube
from tools.cluster.kustomize import DEPLOYMENTS

ADMIN_PORT, PUBLIC_PORT = 9901, 8080
ROLLOUT_TIMEOUT_S = 900  # Triton's first start pulls a large image and loads the model
STEP_TIMEOUT_S = 180.0


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
def port_forward(target: str, remote: int, namespace: str = kube.NAMESPACE) -> Iterator[int]:
    """``kubectl port-forward`` to ``target``'s ``remote`` port; yields the local port."""
    local = free_port()
    args = ["kubectl", "-n", namespace, "port-forward", target, f"{local}:{remote}"]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait(lambda: connectable(local) or proc.poll() is not None, f"port-forward to {target}")
        if proc.poll() is not None:
            why = proc.stderr.read() if proc.stderr else ""
            raise kube.ClusterError(f"{' '.join(args)} exited: {why}")
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
            raise kube.ClusterError(f"{what}: not after {timeout_s:g} s")
        time.sleep(1.0)


def admin_clusters(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/clusters?format=json", timeout=5) as r:
        return dict(json.load(r))


def triton_pods(namespace: str = kube.NAMESPACE) -> dict[str, str]:
    selector = "app.kubernetes.io/name=triton"
    return pod_ips(
        json.loads(kube.kubectl("-n", namespace, "get", "pods", "-l", selector, "-o", "json"))
    )


def demo(port: int, count: int) -> dict[str, Any]:
    """The demo client through the cluster's Envoy; its JSON summary."""
    argv = [sys.executable, "-m", "demo_client", "load", "--target", f"127.0.0.1:{port}",
            "--json", "--count", str(count), "--concurrency", "8", "--wait", "60"]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise kube.ClusterError(f"the demo client failed:\n{result.stderr.strip()[-2000:]}")
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary


@contextlib.contextmanager
def triton_scaled(replicas: int, namespace: str = kube.NAMESPACE) -> Iterator[None]:
    """Triton at ``replicas`` ready pods for the block, then set back as it was, also when the
    block fails: with the autoscaling component its HPA's floor is raised (it would scale a
    manual change back down), else the Deployment is scaled."""
    hpa = kube.kubectl("-n", namespace, "get", "hpa", "triton", "--ignore-not-found", "-o", "name")
    if hpa.strip():
        field, what = "{.spec.minReplicas}", "HorizontalPodAutoscaler triton: minReplicas"
        before = int(
            kube.kubectl("-n", namespace, "get", "hpa", "triton", "-o", f"jsonpath={field}")
        )

        def set_to(count: int) -> None:
            patch = json.dumps({"spec": {"minReplicas": count}})
            kube.kubectl("-n", namespace, "patch", "hpa", "triton", "--type", "merge", "-p", patch)
    else:
        field, what = "{.spec.replicas}", "Deployment triton: replicas"
        before = int(
            kube.kubectl("-n", namespace, "get", "deployment", "triton", "-o", f"jsonpath={field}")
        )

        def set_to(count: int) -> None:
            kube.kubectl("-n", namespace, "scale", "deployment/triton", f"--replicas={count}")

    set_to(replicas)
    kube.step(f"{what} {before} → {replicas}")
    try:
        ready = f"{replicas} ready Triton pods"
        wait(lambda: len(triton_pods(namespace)) >= replicas, ready, 600.0)
        yield
    finally:
        set_to(before)
        kube.step(f"{what} back to {before}")


def rollout_order(found: Sequence[str], namespace: str = kube.NAMESPACE) -> list[str]:
    """The Deployments to wait for: the pipeline's first (each must be there), then the others
    the overlay made (preprocess in the remote placement, monitoring, …) by name."""
    missing = [name for name in DEPLOYMENTS if name not in found]
    if missing:
        raise kube.ClusterError(
            f"no deployment {', '.join(missing)} in namespace {namespace} (found: "
            f"{', '.join(sorted(found)) or 'none'}): `make deploy` first"
        )
    return [*DEPLOYMENTS, *sorted(set(found) - set(DEPLOYMENTS))]


def deployments(namespace: str = kube.NAMESPACE) -> list[str]:
    """The names of inferline's Deployments in the namespace."""
    listed = kube.kubectl("-n", namespace, "get", "deployments", "-l",
                          "app.kubernetes.io/part-of=inferline", "-o", "name")  # fmt: skip
    return [line.split("/", 1)[-1] for line in listed.split()]


def verify(requests: int, namespace: str = kube.NAMESPACE) -> None:
    start = time.monotonic()
    for name in rollout_order(deployments(namespace), namespace):
        kube.step(f"rollout of deployment/{name} …")
        kube.kubectl("-n", namespace, "rollout", "status", f"deployment/{name}",
                     f"--timeout={ROLLOUT_TIMEOUT_S}s")  # fmt: skip
    with (
        port_forward("deployment/envoy", ADMIN_PORT, namespace) as admin,
        port_forward("service/envoy", PUBLIC_PORT, namespace) as public,
    ):
        pods = triton_pods(namespace)
        kube.step(f"Triton pods: {pods}; waiting until Envoy's triton cluster holds exactly them")
        wait(
            lambda: set(triton_hosts(admin_clusters(admin))) == set(pods.values()),
            "Envoy's triton cluster = the Triton pods",
        )
        summary = demo(public, requests)
        errors = summary.get("errors", 0)
        kube.step(f"demo client: {summary.get('images_per_s')} images/s, {errors} errors")
        if errors:
            raise kube.ClusterError(f"the demo client saw errors: {summary.get('errors_by_code')}")
        kube.step(f"scaling Triton {len(pods)} → {len(pods) + 1}")
        with triton_scaled(len(pods) + 1, namespace):
            new = set(triton_pods(namespace).values()) - set(pods.values())
            if not new:
                raise kube.ClusterError("Triton scaled up but no new ready pod IP")
            kube.step(
                f"new Triton pod {sorted(new)}: waiting until Envoy has it, then sends it work"
            )
            wait(lambda: new <= set(triton_hosts(admin_clusters(admin))), "the new pod in Envoy")
            summary = demo(public, requests)
            served = triton_hosts(admin_clusters(admin))
            if summary.get("errors", 0) or not all(served.get(ip, 0) > 0 for ip in new):
                raise kube.ClusterError(
                    f"after the scale-up: {summary.get('errors_by_code')}, {served}"
                )
            kube.step(f"requests per Triton pod: {served}")
    kube.step(f"verified in {time.monotonic() - start:.0f} s")
