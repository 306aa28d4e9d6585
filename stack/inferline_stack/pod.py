"""A GPU pod on this machine: Triton and the preprocess beside it, living and dying together.

``python -m inferline_stack.pod --token-file F --triton "ARGV" --preprocess "ARGV"`` is what the
local stack runs as a Triton replica of the in-pod placement, as Kubernetes runs the two
containers of one pod: both share this machine's ``/dev/shm``, Triton's shared-memory protocol
is restricted to a fresh random access token that only the preprocess reads (``F``, owner-only),
and Envoy reaches the pod at the preprocess's port alone. When one of them exits, the other is
stopped and the pod exits (non-zero), so the stack sees one replica gone, as a pod that failed;
on SIGTERM the preprocess stops first (it finishes its batches), then Triton.

And as in a pod, nothing outlives it: both get SIGTERM from the kernel when the pod dies, however
(even by SIGKILL: :func:`inferline_stack.reaper.die_with_parent`); Triton passes it on to its
server (PyTriton does), whose model stubs watch it. When the pod leads its own process group
(the stack starts it in a session of its own), it stops whatever its two left in it before it
exits.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import secrets
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from inferline_stack import reaper

logger = logging.getLogger("inferline_stack.pod")

TOKEN_ENV = "INFERLINE_TRITON_ACCESS_TOKEN"  # inferline_models.triton reads it
POLL_S = 0.2


def write_token(path: Path) -> str:
    """A new random token in ``path``, readable by this user alone."""
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path.with_suffix(".tmp"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(token)
    path.with_suffix(".tmp").replace(path)
    return token


def stop(process: subprocess.Popen[bytes], grace_s: float) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run(token_file: Path, triton: Sequence[str], preprocess: Sequence[str], grace_s: float) -> int:
    stopping = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        logger.info("received %s: stopping the pod", signal.Signals(signum).name)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    token = write_token(token_file)
    env = {**os.environ, TOKEN_ENV: token}
    children = [  # each dies with the pod, even one killed by SIGKILL
        ("triton", subprocess.Popen(list(triton), env=env, preexec_fn=reaper.die_with_parent())),
        ("preprocess", subprocess.Popen(list(preprocess), preexec_fn=reaper.die_with_parent())),
    ]
    logger.info("pod: %s", ", ".join(f"{name} pid {p.pid}" for name, p in children))
    code = 0
    while not stopping.is_set():
        exited = [(name, p.returncode) for name, p in children if p.poll() is not None]
        if exited:
            name, status = exited[0]
            logger.error("%s exited (status %s): stopping the rest of the pod", name, status)
            code = 1
            break
        stopping.wait(POLL_S)
    for _, process in reversed(children):  # the preprocess first: it drains into Triton
        stop(process, grace_s)
    if os.getpgrp() == os.getpid():  # what they left in the pod's group (a server, its stubs)
        reaper.stop([reaper.Claim.leading(os.getpid())], grace_s)
    with contextlib.suppress(OSError):
        token_file.unlink()
    return code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inferline_stack.pod", description=__doc__)
    parser.add_argument("--token-file", type=Path, required=True)
    parser.add_argument("--triton", required=True, help="Triton's command line")
    parser.add_argument("--preprocess", required=True, help="the preprocess's command line")
    parser.add_argument("--grace-s", type=float, default=15.0)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    start = time.monotonic()
    code = run(
        args.token_file, shlex.split(args.triton), shlex.split(args.preprocess), args.grace_s
    )
    logger.info("pod stopped after %.0fs", time.monotonic() - start)
    return code


if __name__ == "__main__":
    sys.exit(main())
