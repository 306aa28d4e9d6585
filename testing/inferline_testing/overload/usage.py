"""What the stack's processes and this one use while a block runs: each process group's peak
resident memory (sampled), and this process's share of the machine's cores."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

from inferline_stack.config import StackConfig
from inferline_stack.processes import ProcessTable
from inferline_testing.procfs import group_usage


@contextlib.contextmanager
def own_cpu() -> Iterator[list[float]]:
    """The share of this machine's cores this process used while the block ran (filled in on
    leaving, as the list's one item)."""
    share: list[float] = []
    start, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()
    try:
        yield share
    finally:
        end = resource.getrusage(resource.RUSAGE_SELF)
        used = end.ru_utime - start.ru_utime + end.ru_stime - start.ru_stime
        cores = len(os.sched_getaffinity(0))
        share.append(used / max(time.monotonic() - wall, 1e-9) / cores)


def stack_groups(config: StackConfig) -> dict[str, int]:
    """{process name: its process group} of the stack's running processes."""
    table = ProcessTable(Path(config.run_dir))
    return {name: pid for name in table.names() if (pid := table.pid(name)) is not None}


@contextlib.asynccontextmanager
async def peak_rss(
    groups: Mapping[str, int], every_s: float = 0.25
) -> AsyncIterator[dict[str, int]]:
    """The most resident memory each process group reached while the block ran (sampled)."""
    peaks = {name: 0 for name in groups}

    def sample() -> None:
        for name, pgid in groups.items():
            peaks[name] = max(peaks[name], group_usage(pgid).rss_bytes)

    async def sampler() -> None:
        while True:
            await asyncio.to_thread(sample)
            await asyncio.sleep(every_s)

    task = asyncio.create_task(sampler())
    try:
        yield peaks
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        sample()
