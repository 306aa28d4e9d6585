"""What a process group uses, from Linux's /proc: resident memory (now and at its peak), open file
descriptors, CPU seconds. The local stack starts each process in a group of its own (Triton's
group holds PyTriton, tritonserver and its Python stubs), so a group is a process as the user
sees it. A process that has gone counts as nothing."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Usage:
    rss_bytes: int  # resident now
    peak_rss_bytes: int  # the high-water mark of each member, summed
    fds: int
    cpu_s: float


def group_pids(pgid: int) -> list[int]:
    """The live processes of group ``pgid``."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 of stat: the process group
            pids.append(int(entry.name))
    return pids


def _status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def process_usage(pid: int) -> Usage:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        peak = _status_kib(pid, "VmHWM") * 1024
        fds = sum(1 for _ in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return Usage(0, 0, 0, 0.0)
    cpu = (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime
    return Usage(rss, peak, fds, cpu)


def group_usage(pgid: int) -> Usage:
    """The sum over the group's live members."""
    usages = [process_usage(pid) for pid in group_pids(pgid)]
    return Usage(
        sum(u.rss_bytes for u in usages),
        sum(u.peak_rss_bytes for u in usages),
        sum(u.fds for u in usages),
        sum(u.cpu_s for u in usages),
    )
