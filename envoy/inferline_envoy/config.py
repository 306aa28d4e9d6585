"""The command line: render the one Envoy template into a bootstrap, for the local stack or
Kubernetes.

    python -m inferline_envoy.config --local > .run/envoy.yaml
    python -m inferline_envoy.config --kubernetes --xds-address eds:18000
    python -m inferline_envoy.config --local --listener triton=18083 --admin-port 19901 --validate

One template for both: the profiles differ only in parameters (:mod:`.params`), every one a
flag. ``-o`` writes the SDS files (:mod:`.sds`) beside the bootstrap; ``--validate`` runs the
real binary's ``envoy --mode validate`` on the result (:mod:`.binary`).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inferline_envoy.binary import validate
from inferline_envoy.params import DEFAULT_LISTENERS, KUBERNETES, LOCAL, PROFILES, EnvoyParams
from inferline_envoy.render import render
from inferline_envoy.sds import write_sds
from inferline_envoy.template import TEMPLATE_NAME, dump


def _listener(text: str) -> tuple[str, int]:
    name, _, port = text.partition("=")
    if not name or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected cluster=port, got {text!r}")
    return name, int(port)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected host:port, got {text!r}")
    return host, int(port)


def parse_args(argv: Sequence[str] | None = None) -> tuple[EnvoyParams, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="python -m inferline_envoy.config",
        description="Render the one Envoy template for the local stack or Kubernetes.",
    )
    profile = parser.add_mutually_exclusive_group(required=True)
    profile.add_argument("--local", dest="profile", action="store_const", const="local")
    profile.add_argument("--kubernetes", dest="profile", action="store_const", const="kubernetes")
    parser.add_argument(
        "--listener",
        action="append",
        type=_listener,
        metavar="CLUSTER=PORT",
        help="a listener per hop (repeat); default: "
        + " ".join(f"{n}={p}" for n, p in DEFAULT_LISTENERS),
    )
    parser.add_argument("--xds-address", type=_address, metavar="HOST:PORT")
    skip = {"listeners", "xds_host", "xds_port"}
    for f in dataclasses.fields(EnvoyParams):
        if f.name in skip:
            continue
        kind = type(getattr(LOCAL, f.name))
        shape: dict[str, Any] = (
            {"action": argparse.BooleanOptionalAction} if kind is bool else {"type": kind}
        )  # --shed / --no-shed: a type of bool would take "--shed false" as true
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            **shape,
            default=None,
            help=f"local default {getattr(LOCAL, f.name)!r}, "
            f"kubernetes {getattr(KUBERNETES, f.name)!r}",
        )
    parser.add_argument("--template", type=Path, help=f"instead of the packaged {TEMPLATE_NAME}")
    parser.add_argument("--output", "-o", type=Path, help="write here instead of stdout")
    parser.add_argument("--validate", action="store_true", help="run envoy --mode validate on it")
    args = parser.parse_args(argv)
    changes: dict[str, Any] = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(EnvoyParams)
        if f.name not in skip and getattr(args, f.name) is not None
    }
    if args.listener:
        changes["listeners"] = tuple(args.listener)
    if args.xds_address:
        changes["xds_host"], changes["xds_port"] = args.xds_address
    try:
        params = dataclasses.replace(PROFILES[args.profile], **changes)
    except ValueError as exc:
        parser.error(str(exc))
    return params, args


def main(argv: Sequence[str] | None = None) -> int:
    params, args = parse_args(argv)
    config = render(params, args.template)
    text = dump(config)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text, encoding="utf-8")
        write_sds(params, args.template)  # the files the bootstrap reads certificates through
    else:
        sys.stdout.write(text)
    if args.validate:
        ok, output = validate(config)
        sys.stderr.write(output.splitlines()[-1] + "\n" if output else "")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
