"""``python -m inferline_preflight`` (the image's ``inferline-preflight``): the node's NVIDIA
driver, checked before GPU containers start.

Run as the first init container of a GPU pod. Exit 0 with one line when the driver runs the
image's CUDA version (natively, through forward compatibility on a data-center GPU, or, with a
warning, in minor version compatibility mode); exit 1 with a message that names the driver found,
the image's CUDA version and the driver it needs, instead of the crash loop of a container whose
CUDA is newer than the node's driver. Exit 2: a bad flag or variable.

The message also goes to Kubernetes' termination message file (/dev/termination-log), so
``kubectl describe pod`` shows it under the init container's last state.

Every flag has a variable: INFERLINE_PREFLIGHT_CUDA, _REQUIRE_GPU, _STRICT, _DATACENTER,
_TERMINATION_LOG.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from inferline_preflight import compat, nvml

PREFIX = "INFERLINE_PREFLIGHT_"
TERMINATION_LOG = "/dev/termination-log"
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_DATACENTER = {"auto": None, "yes": True, "no": False}


class ConfigError(ValueError):
    """A variable's value does not parse; the message names it."""


def _bool(environ: Mapping[str, str], name: str) -> bool:
    raw = environ.get(PREFIX + name, "")
    if not raw.strip() or raw.strip().lower() in _FALSE:
        return False
    if raw.strip().lower() in _TRUE:
        return True
    raise ConfigError(f"{PREFIX}{name}={raw!r}: expected true or false")


def parse_args(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> argparse.Namespace:
    """Flags over ``INFERLINE_PREFLIGHT_*`` variables over defaults."""
    env = os.environ if environ is None else environ
    datacenter = env.get(PREFIX + "DATACENTER", "auto").strip().lower() or "auto"
    if datacenter not in _DATACENTER:
        raise ConfigError(f"{PREFIX}DATACENTER={datacenter!r}: expected auto, yes or no")
    parser = argparse.ArgumentParser(
        prog="python -m inferline_preflight",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--cuda",
        default=env.get(PREFIX + "CUDA", "").strip() or compat.DEFAULT_CUDA,
        help="the image's CUDA version (default: %(default)s, Triton 24.10's)",
    )
    parser.add_argument(
        "--require-gpu",
        action=argparse.BooleanOptionalAction,
        default=_bool(env, "REQUIRE_GPU"),
        help="no driver or no GPU visible is an error, not a skip",
    )
    parser.add_argument(
        "--strict",
        action=argparse.BooleanOptionalAction,
        default=_bool(env, "STRICT"),
        help="a driver that needs CUDA minor version compatibility is an error, not a warning",
    )
    parser.add_argument(
        "--datacenter",
        choices=list(_DATACENTER),
        default=datacenter,
        help="whether the GPUs are data-center GPUs (forward compatibility); auto: by name",
    )
    parser.add_argument(
        "--termination-log",
        default=env.get(PREFIX + "TERMINATION_LOG", TERMINATION_LOG),
        help="also write the message here when the file exists; empty: don't (default: "
        "%(default)s)",
    )
    return parser.parse_args(argv)


def write_termination_log(path: str, message: str) -> None:
    """Kubernetes shows this file's content as the container's termination message; it creates
    the file, so one that does not exist means no Kubernetes: then nothing is written."""
    if not path:
        return
    target = Path(path)
    try:
        if target.is_file():
            target.write_text(message + "\n", encoding="utf-8")
    except OSError:
        pass  # the message is on stdout/stderr anyway


def main(
    argv: Sequence[str] | None = None,
    environ: Mapping[str, str] | None = None,
    nvml_module: nvml.Nvml | compat.Missing | None = None,
) -> int:
    try:
        args = parse_args(argv, environ)
        requirement = compat.Requirement.for_cuda(args.cuda)
    except ConfigError as e:
        sys.stderr.write(f"preflight: {e}\n")
        return 2
    except ValueError as e:
        sys.stderr.write(f"preflight: --cuda / {PREFIX}CUDA: {e}\n")
        return 2
    options = compat.Options(
        require_gpu=args.require_gpu, strict=args.strict, datacenter=_DATACENTER[args.datacenter]
    )
    verdict = compat.check(nvml.read(nvml_module), requirement, options)
    (sys.stdout if verdict.ok else sys.stderr).write(verdict.message + "\n")
    write_termination_log(args.termination_log, verdict.message)
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
