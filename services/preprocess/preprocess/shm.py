"""A bounded ring of POSIX shared-memory slots that decoded batches are handed to Triton in.

Each slot is one file ``/dev/shm/<prefix>-<i>``, created owner-only (0600: Triton runs as the
same user, in the same pod), sized for the largest batch, and registered with Triton once as a
system shared-memory region of the same name. A batch holds a slot from decoding until Triton
has answered; when every slot is held, the next batch waits for one (backpressure, bounded by
its deadline).

Ownership survives a ``kill -9``: the ring holds an exclusive ``flock`` on
``/dev/shm/<prefix>.lock`` for as long as its process lives, and the kernel drops it with the
process. A new ring that takes the lock owns the prefix, so whatever segments bear it are a dead
predecessor's, and it unlinks them before creating its own; a second live process with the same
prefix is refused by name instead of destroying the first one's batches. No gRPC here.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import mmap
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

SHM = Path("/dev/shm")
PREFIX = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,100}$")


class RingBusy(RuntimeError):
    """Another live process owns the prefix."""


class NoSlot(TimeoutError):
    """Every slot stayed in use until the batch's deadline."""


@dataclass(frozen=True)
class Slot:
    index: int
    name: str  # the region's name at Triton, and the file's under /dev/shm
    size: int
    buffer: mmap.mmap

    @property
    def key(self) -> str:
        """The POSIX shared-memory key Triton opens (``shm_open``)."""
        return f"/{self.name}"

    def view(self, shape: tuple[int, ...]) -> npt.NDArray[np.uint8]:
        """The slot's first bytes as a uint8 array of ``shape`` (no copy)."""
        count = int(np.prod(shape))
        if count > self.size:
            raise ValueError(
                f"a batch of {count} bytes does not fit slot {self.name} ({self.size})"
            )
        return np.frombuffer(self.buffer, np.uint8, count).reshape(shape)


class SharedMemoryRing:
    """``slots`` regions of ``slot_bytes`` each, under ``/dev/shm/<prefix>-<i>``."""

    def __init__(self, prefix: str, slots: int, slot_bytes: int, directory: Path = SHM) -> None:
        if not PREFIX.match(prefix):
            raise ValueError(f"shared-memory prefix {prefix!r}: letters, digits, '_', '.', '-'")
        if slots < 1 or slot_bytes < 1:
            raise ValueError("a ring needs at least one slot of at least one byte")
        self.prefix, self.directory = prefix, directory
        self._lock_fd = _take(directory / f"{prefix}.lock")
        self.reclaimed = reclaim(prefix, directory)
        self.slots: list[Slot] = []
        try:
            for index in range(slots):
                self.slots.append(_create(directory, f"{prefix}-{index}", index, slot_bytes))
        except BaseException:
            self.close()
            raise
        self._free: asyncio.Queue[Slot] = asyncio.Queue()
        for slot in self.slots:
            self._free.put_nowait(slot)

    @property
    def in_use(self) -> int:
        return len(self.slots) - self._free.qsize()

    @contextlib.asynccontextmanager
    async def slot(self, time_left: float | None) -> AsyncIterator[Slot]:
        """A free slot, held while the body runs; NoSlot when none frees in ``time_left`` s."""
        try:
            slot = await asyncio.wait_for(self._free.get(), time_left)
        except TimeoutError:
            raise NoSlot(f"all {len(self.slots)} shared-memory slots stayed in use") from None
        try:
            yield slot
        finally:
            self._free.put_nowait(slot)

    def close(self) -> None:
        """Unmap and unlink every slot, then give the prefix up."""
        for slot in self.slots:
            with contextlib.suppress(BufferError, ValueError):
                slot.buffer.close()
            (self.directory / slot.name).unlink(missing_ok=True)
        self.slots = []
        if self._lock_fd >= 0:
            (self.directory / f"{self.prefix}.lock").unlink(missing_ok=True)
            os.close(self._lock_fd)
            self._lock_fd = -1


def _take(lock: Path) -> int:
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RingBusy(
            f"another live process owns the shared-memory prefix of {lock} (one preprocess per "
            "Triton: give each its own INFERLINE_PREPROCESS_SHM_PREFIX)"
        ) from None
    return fd


def segments(prefix: str, directory: Path = SHM) -> list[Path]:
    """The slot files bearing ``prefix`` (``<prefix>-<i>``)."""
    pattern = re.compile(rf"^{re.escape(prefix)}-[0-9]+$")
    try:
        return sorted(p for p in directory.iterdir() if pattern.match(p.name))
    except OSError:
        return []


def reclaim(prefix: str, directory: Path = SHM) -> int:
    """Unlink what a dead owner of ``prefix`` left (call it holding the lock); bytes freed."""
    freed = 0
    for path in segments(prefix, directory):
        with contextlib.suppress(OSError):
            size = path.stat().st_size
            path.unlink()
            freed += size
    return freed


def _create(directory: Path, name: str, index: int, size: int) -> Slot:
    fd = os.open(directory / name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, size)  # tmpfs: pages are only taken when written
        buffer = mmap.mmap(fd, size)
    except BaseException:
        (directory / name).unlink(missing_ok=True)
        raise
    finally:
        os.close(fd)
    return Slot(index, name, size, buffer)
