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
    """Every /dev/shm file some live process maps or holds open (of those this user can see).
    A scan of every process's maps and open files: its cost grows with the processes running,
    so it runs only where a segment is a candidate (:func:`orphan_segments`)."""
    prefix = f"{SHM}/"
    used: set[str] = set()
    # os.* rather than Path: a scan walks thousands of entries, and Path objects cost more
    # than the reads (py-spy, make test).
    for pid in os.listdir("/proc"):  # noqa: PTH208
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/maps", "rb") as maps:
                mapped = maps.read()
        except OSError:  # gone, or another user's
            continue
        if f" {prefix}".encode() in mapped:  # most map no shared memory: no line to split
            used.update(line.split(None, 5)[5].removesuffix(" (deleted)")
                        for line in mapped.decode(errors="replace").splitlines()
                        if f" {prefix}" in line)  # fmt: skip
        try:
            fds = os.listdir(f"/proc/{pid}/fd")  # noqa: PTH208
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")  # noqa: PTH115
            except OSError:
                continue
            if target.startswith(prefix):
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
    now, uid = time.time(), os.getuid()
    candidates = []
    for path in random:
        try:
            stat = path.stat()
        except OSError:
            continue
        if stat.st_uid == uid and now - stat.st_mtime >= min_age_s:
            candidates.append(path)
    used = in_use() if candidates else set()
    return orphans + [path for path in candidates if str(path) not in used]


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
