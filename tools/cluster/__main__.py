"""``python -m tools.cluster deploy|undeploy|verify``: the command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import tools.cluster
from tools.cluster import kube
from tools.cluster.deploy import deploy
from tools.cluster.kustomize import OVERLAYS
from tools.cluster.undeploy import undeploy
from tools.cluster.verify import verify


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.cluster",
        description=tools.cluster.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {name: sub.add_parser(name) for name in ("deploy", "undeploy", "verify")}
    for command, one in commands.items():
        one.add_argument("--namespace", default=kube.NAMESPACE, help="the pipeline's namespace")
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
        kube.check_namespace(args.namespace)
        if args.command == "deploy":
            deploy(args.overlay, args.registry, args.tag, args.dry_run, args.namespace)
        elif args.command == "undeploy":
            undeploy(args.overlay, args.namespace)
        else:
            verify(args.requests, args.namespace)
    except kube.ClusterError as exc:
        sys.stderr.write(f"{args.command}: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
