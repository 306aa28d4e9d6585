"""What a process group uses, from Linux's /proc: resident memory (now and at its peak), open file
descriptors, CPU seconds. The local stack starts each process in a group of its own (Triton's
group holds PyTriton, tritonserver and its Python stubs), so a group is a process as the user
sees it. A process that has gone counts as nothing. And which processes run: a process tree,
or every process that names a folder (a run folder: what a stack or benchmark left running)."""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
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


@dataclass(frozen=True)
class Listening:
    """A socket a process listens on (TCP) or is bound to (UDP)."""

    protocol: str  # tcp or udp
    address: str  # as ipaddress writes it: 127.0.0.1, ::, ::ffff:127.0.0.1
    port: int


# /proc/net/{tcp,udp}[6] states: 0A is TCP LISTEN; 07 is UDP's (unconnected) CLOSE
BOUND_STATES = {"tcp": "0A", "udp": "07"}


def _address(hex_address: str) -> str:
    """/proc/net's address: IPv4 as one little-endian word, IPv6 as four."""
    raw = bytes.fromhex(hex_address)
    words = [raw[i : i + 4][::-1] for i in range(0, len(raw), 4)]
    return str(ipaddress.ip_address(b"".join(words)))


def _bound_sockets() -> dict[int, Listening]:
    """{socket inode: what it listens on} of every listening or bound socket in this network
    namespace."""
    found: dict[int, Listening] = {}
    for protocol, state in BOUND_STATES.items():
        for suffix in ("", "6"):
            try:
                lines = Path(f"/proc/net/{protocol}{suffix}").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                if fields[3] != state:
                    continue
                address, port = fields[1].rsplit(":", 1)
                found[int(fields[9])] = Listening(protocol, _address(address), int(port, 16))
    return found


def listening(pids: Iterable[int]) -> set[Listening]:
    """Every socket ``pids`` listen on (TCP) or are bound to (UDP)."""
    bound = _bound_sockets()
    found = set()
    for pid in pids:
        for link in _fd_links(pid):
            if link.startswith("socket:["):
                inode = int(link[len("socket:[") : -1])
                if inode in bound:
                    found.add(bound[inode])
    return found


def _fd_links(pid: int) -> list[str]:
    """What each open file descriptor of ``pid`` points at (those that close meanwhile left out)."""
    links = []
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # gone, or not ours to read
        return []
    for fd in fds:
        try:
            links.append(str(fd.readlink()))
        except OSError:
            continue
    return links


def shared_memory(pids: Iterable[int]) -> set[Path]:
    """The POSIX shared memory (``/dev/shm`` files) ``pids`` map."""
    found = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        for line in maps.splitlines():
            path = line.split(None, 5)[5:]
            if path and path[0].startswith("/dev/shm/"):
                found.add(Path(path[0].removesuffix(" (deleted)")))
    return found


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from its field 3 (state) on; None once gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def running(pids: Iterable[int]) -> list[int]:
    """Those of ``pids`` that run: neither gone nor zombies (a zombie holds nothing)."""
    return [pid for pid in pids if (stat := _stat(pid)) is not None and stat[0] not in "ZX"]


def descendants(pid: int) -> list[int]:
    """The live processes ``pid`` started, and those they started, and so on."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
            parents.setdefault(int(stat[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return running(found)


def naming(folder: Path | str) -> list[int]:
    """Every live process but this one whose command line, working directory or environment
    names ``folder``: what a stack or benchmark run there left (every one of their processes
    inherits a variable naming it: its owner token, or ``TMPDIR`` pointed there)."""
    text = str(Path(folder).resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            named = text.encode() in (entry / "cmdline").read_bytes()
            named = named or text.encode() in (entry / "environ").read_bytes()
            named = named or str((entry / "cwd").readlink()).startswith(text)
        except OSError:  # gone, or another user's
            continue
        if named:
            found.append(int(entry.name))
    return running(found)


def describe(pids: Iterable[int]) -> str:
    """``pid: command line`` of each, for a failure message."""
    lines = []
    for pid in pids:
        try:
            argv = (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        lines.append(f"{pid}: {argv.decode(errors='replace')[:300]}")
    return "\n".join(lines)
