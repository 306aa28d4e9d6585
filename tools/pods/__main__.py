"""python -m tools.pods: the rendered overlay as podman pods on this machine (see tools.pods).

    python -m tools.pods up [--registry localhost/inferline --tag dev] [DEPLOYMENT ...]
    python -m tools.pods scale triton 2 --registry localhost/inferline --tag dev
    python -m tools.pods status
    python -m tools.pods down

``up`` needs the images ``make images REGISTRY=… TAG=…`` built; Triton's image is pulled, or a
stand-in is made (tools.containers.standins). Deployments whose images are neither here nor
pullable, and have no stand-in (the monitoring component's Prometheus, Alertmanager, Grafana
and prometheus-adapter here), are left out and named. Envoy's public listener is the envoy
pod's IP, port 8080 (``status`` prints it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from tools.cluster import kube, kustomize
from tools.containers import standins
from tools.containers.engine import Engine, EngineError, find_engine
from tools.pods.manifests import Manifests
from tools.pods.records import PodRecord, RunError
from tools.pods.runner import Cluster, leftovers
from tools.pods.spec import SpecError

ROOT = Path(__file__).resolve().parents[2]
RUN_DIR = ROOT / ".run" / "pods"
ORDER = kustomize.DEPLOYMENTS  # the control plane and Envoy first, then the pipeline's hops
BUILT = "/inferline-"  # k8s/CONTRACT.md: what make images builds is <registry>/inferline-<name>


def render(overlay: str, registry: str, tag: str, namespace: str) -> Manifests:
    """What ``make deploy`` would apply, as objects."""
    text = kustomize.render(overlay, registry, tag, namespace)
    return Manifests(yaml.safe_load_all(text))


def runnable(engine: Engine, manifests: Manifests, wanted: Sequence[str]) -> list[str]:
    """The Deployments to start, in order: ``wanted``, or every one whose images are here (or
    pullable, or have a stand-in); the others are named on stdout."""
    deployments = manifests.deployments()
    if unknown := [d for d in wanted if d not in deployments]:
        raise RunError(f"no Deployment {unknown} in the render; it has {sorted(deployments)}")
    names = list(wanted) or [
        *(d for d in ORDER if d in deployments),
        *sorted(set(deployments) - set(ORDER)),
    ]
    chosen = []
    for name in names:
        missing = []
        for image in manifests.images(name):
            if BUILT in image:
                if not standins.present(engine, image):
                    raise RunError(f"{name}: image {image} is not built: make images first")
                continue
            try:
                standins.ensure(engine, [image])
            except standins.StandInError:
                missing.append(image)
        if missing and not wanted:
            print(f"left out: {name} (not here, not pullable, no stand-in: {', '.join(missing)})")
        elif missing:
            raise RunError(f"{name}: images {missing} are not here and cannot be pulled")
        else:
            chosen.append(name)
    return chosen


def report(records: Sequence[PodRecord]) -> None:
    for record in records:
        for c in record.containers:
            ready = f"ready in {c.ready_s:.1f} s (budget {c.budget_s:.0f} s)" if c.ready_s else ""
            stop = ""
            if c.exited_before_stop:
                stop = f"had exited before its stop (exit {c.exit_code})"
            elif c.stopped_s is not None:
                how = "SIGKILLed at the end of its grace" if c.killed else f"exit {c.exit_code}"
                stop = f"stopped in {c.stopped_s:.1f} s of {record.grace_s:.0f} ({how})"
            print(f"  {record.name}/{c.name}: {ready or stop}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.pods",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=("up", "scale", "status", "down"))
    parser.add_argument("names", nargs="*", help="up: Deployments; scale: DEPLOYMENT REPLICAS")
    parser.add_argument("--overlay", default="cpu", choices=kustomize.OVERLAYS)
    parser.add_argument("--registry", default="localhost/inferline")
    parser.add_argument("--tag", default="dev")
    parser.add_argument("--namespace", default=kube.NAMESPACE)
    parser.add_argument("--run-dir", type=Path, default=RUN_DIR)
    args = parser.parse_args(argv)
    try:
        engine = find_engine("podman")
        if args.command == "down" and not args.names:
            manifests = render(args.overlay, args.registry, args.tag, args.namespace)
            report(Cluster(engine, manifests, args.run_dir).down())
            left = {k: v for k, v in leftovers(engine, args.run_dir).items() if v}
            print(f"left: {left}" if left else "nothing of the pods is left")
            return 1 if left else 0
        manifests = render(args.overlay, args.registry, args.tag, args.namespace)
        pods = Cluster(engine, manifests, args.run_dir)
        if args.command == "up":
            report(pods.up(runnable(engine, manifests, args.names)))
        elif args.command == "scale":
            if len(args.names) != 2 or not args.names[1].isdigit():
                parser.error("scale takes DEPLOYMENT REPLICAS, e.g. scale triton 2")
            started, stopped = pods.scale(args.names[0], int(args.names[1]))
            report([*started, *stopped])
        pods.refresh()
        for name, record in sorted(pods.records.items()):
            ready = all(c.ready for c in record.containers)
            print(f"{name:16} {record.ip:15} {'ready' if ready else 'NOT READY'}")
        if "envoy-0" in pods.records:
            print(f"public endpoint (Envoy): {pods.records['envoy-0'].ip}:8080")
    except (EngineError, RunError, SpecError, standins.StandInError, kube.ClusterError) as e:
        print(f"pods: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
