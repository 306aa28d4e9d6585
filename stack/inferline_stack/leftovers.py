"""What a Triton replica killed with SIGKILL leaves behind, and freeing it.

PyTriton keeps its sockets and model store in a workspace folder, and its tensors in POSIX
shared memory: ``/dev/shm/pytrtion<pid>-*`` (named after its process) and ``/dev/shm/psm_*``
(Python's ``multiprocessing.shared_memory``, random names). A clean stop frees them; a kill -9
does not. The stack gives each replica a workspace under its run folder (``workspaces/triton-<i>``),
so those are the stack's to remove. A ``psm_*`` segment cannot be traced to the process that
made it once that process is gone; but one that no live process maps or holds open is nobody's
(its maker unlinks it when done, and a segment in use is mapped by its maker), so the stack
frees every such segment of its own user, past a short age that covers the moment between
creating a segment and mapping it. The in-pod rings (``inferline-*``, :mod:`preprocess.shm`) are
freed the same way once their pod is gone: a live ring is mapped by its preprocess, and a
registered one by its Triton.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

SHM = Path("/dev/shm")
NAMED = re.compile(r"^pytrtion(\d+)-")  # PyTriton's own: named after the process that made it
RANDOM = "psm_"  # multiprocessing.shared_memory's
# In-pod: the rings of the preprocess beside each Triton (preprocess.shm), and their lock files.
RINGS = "inferline-"
# A segment is mapped within microseconds of its creation (SharedMemory's constructor does both);
# a younger one may be in that moment, so it is left for the next sweep.
MIN_AGE_S = 2.0


def workspaces(run_dir: str | Path) -> Path:
    return Path(run_dir) / "workspaces"


def workspace(run_dir: str | Path, name: str) -> Path:
    """Replica ``name``'s PyTriton workspace (it must not exist when the replica starts)."""
    return workspaces(run_dir) / name


def remove_workspace(run_dir: str | Path, name: str) -> None:
    shutil.rmtree(workspace(run_dir, name), ignore_errors=True)


def in_use() -> set[str]:
    """Every /dev/shm file some live process maps or holds open (of those this user can see)."""
    used: set[str] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            maps = (proc / "maps").read_text()
        except OSError:  # gone, or another user's
            continue
        used.update(line.split(None, 5)[5].removesuffix(" (deleted)")
                    for line in maps.splitlines() if f" {SHM}/" in line)  # fmt: skip
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                target = str(fd.readlink())
            except OSError:
                continue
            if target.startswith(f"{SHM}/"):
                used.add(target)
    return used


def alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def orphan_segments(min_age_s: float = MIN_AGE_S) -> list[Path]:
    """PyTriton's and the pods' shared memory segments of this user that are nobody's: a
    ``pytrtion<pid>-*`` whose process is gone, a ``psm_*`` or ``inferline-*`` (a ring slot, or
    its lock) that no live process maps or holds open."""
    try:
        named = {p: m for p in SHM.iterdir() if (m := NAMED.match(p.name))}
        random = [p for p in SHM.iterdir() if p.name.startswith((RANDOM, RINGS))]
    except OSError:  # no /dev/shm
        return []
    orphans = [p for p, m in named.items() if not alive(int(m.group(1)))]
    used, now, uid = in_use(), time.time(), os.getuid()
    for path in random:
        try:
            stat = path.stat()
        except OSError:
            continue
        if stat.st_uid == uid and now - stat.st_mtime >= min_age_s and str(path) not in used:
            orphans.append(path)
    return orphans


def free_orphans(min_age_s: float = MIN_AGE_S) -> int:
    """Unlink :func:`orphan_segments`; how many bytes that freed."""
    freed = 0
    for path in orphan_segments(min_age_s):
        try:
            size = path.stat().st_size
            path.unlink()
        except OSError:
            continue
        freed += size
    return freed
