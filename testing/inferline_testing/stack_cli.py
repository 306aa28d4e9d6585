"""The local stack's command line as ``make`` runs it (``python -m inferline_stack …``), for
tests that drive a running stack from outside: ``make scale``, ``make status``."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Mapping

from inferline_stack.config import PREFIX, StackConfig

logger = logging.getLogger(__name__)

TIMEOUT_S = 300.0  # a new Triton replica with the real model, on a busy small machine


async def run(env: Mapping[str, str], *args: str, timeout_s: float = TIMEOUT_S) -> tuple[int, str]:
    """``python -m inferline_stack ARGS`` in ``env``: its exit status and output (logged too)."""
    proc = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "inferline_stack", *args),
        env=dict(env),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    text = out.decode(errors="replace")
    logger.info("inferline_stack %s (exit %s):\n%s", " ".join(args), proc.returncode, text)
    return proc.returncode or 0, text


async def cli(config: StackConfig, *args: str, timeout_s: float = TIMEOUT_S) -> str:
    """``python -m inferline_stack ARGS`` with this stack's configuration; fails unless it
    exits 0. Its output."""
    code, text = await run({**os.environ, **config.environ()}, *args, timeout_s=timeout_s)
    assert code == 0, text
    return text


async def scale(config: StackConfig, service: str, replicas: int) -> str:
    """``make scale SERVICE=service REPLICAS=replicas``."""
    return await cli(config, "scale", "--service", service, "--replicas", str(replicas))


async def another_shell(config: StackConfig, *args: str, **settings: str) -> tuple[int, str]:
    """``make …`` typed in another shell: none of the settings the stack was started with
    (only where its run folder is), plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(f"{PREFIX}_")}
    env.update({f"{PREFIX}_RUN_DIR": config.run_dir, **settings})
    return await run(env, *args)
