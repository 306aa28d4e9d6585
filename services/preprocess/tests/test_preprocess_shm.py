"""The shared-memory ring of the in-pod placement: owner-only slots, backpressure, and what a
``kill -9`` leaves reclaimed by the next owner of the prefix."""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from preprocess.shm import NoSlot, RingBusy, SharedMemoryRing, segments


@pytest.fixture
def prefix() -> str:
    return f"inferline-test-{uuid.uuid4().hex[:8]}"


def test_slots_are_owner_only_and_gone_after_close(prefix: str) -> None:
    ring = SharedMemoryRing(prefix, 3, 4096)
    files = segments(prefix)
    assert [f.name for f in files] == [f"{prefix}-{i}" for i in range(3)]
    for path in files:
        mode = path.stat().st_mode
        assert stat.S_IMODE(mode) == 0o600 and path.stat().st_size == 4096
    view = ring.slots[1].view((2, 3, 4, 4))
    view[:] = 7
    assert Path(f"/dev/shm/{prefix}-1").read_bytes()[:96] == b"\x07" * 96  # what Triton reads
    with pytest.raises(ValueError, match="does not fit"):
        ring.slots[0].view((1, 3, 64, 64))
    del view
    ring.close()
    assert segments(prefix) == [] and not Path(f"/dev/shm/{prefix}.lock").exists()


async def test_a_batch_waits_for_a_free_slot_until_its_deadline(prefix: str) -> None:
    ring = SharedMemoryRing(prefix, 1, 64)
    try:
        async with ring.slot(1.0) as held:
            assert ring.in_use == 1
            with pytest.raises(NoSlot, match="all 1 shared-memory slots"):
                async with ring.slot(0.05):
                    pass
            waiter = asyncio.create_task(_take(ring))
            await asyncio.sleep(0)  # it waits...
            assert not waiter.done()
        assert await waiter == held.name  # ...and gets the slot once it is given back
        assert ring.in_use == 0
    finally:
        ring.close()


async def _take(ring: SharedMemoryRing) -> str:
    async with ring.slot(5.0) as slot:
        return slot.name


def test_a_second_live_owner_is_refused(prefix: str) -> None:
    ring = SharedMemoryRing(prefix, 1, 64)
    try:
        with pytest.raises(RingBusy, match="INFERLINE_PREPROCESS_SHM_PREFIX"):
            SharedMemoryRing(prefix, 1, 64)
        assert len(segments(prefix)) == 1  # the first owner's slot is untouched
    finally:
        ring.close()


def test_what_a_kill_9_leaves_is_reclaimed_by_the_next_owner(prefix: str) -> None:
    code = (
        "import sys, time; from preprocess.shm import SharedMemoryRing\n"
        f"ring = SharedMemoryRing({prefix!r}, 2, 1 << 20)\n"
        "ring.slots[0].view((1 << 20,))[:] = 1\n"
        "print('ready', flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        left = {p.name: p.stat().st_ino for p in segments(prefix)}
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        assert len(left) == 2 and {p.name for p in segments(prefix)} == set(left)  # left behind
        ring = SharedMemoryRing(prefix, 2, 1 << 20)  # the lock died with its owner
        try:
            assert ring.reclaimed == 2 << 20
            now = {p.name: p.stat().st_ino for p in segments(prefix)}
            assert set(now) == set(left) and not set(now.values()) & set(left.values())
            assert not np.frombuffer(ring.slots[0].buffer, np.uint8).any()  # fresh, not reused
        finally:
            ring.close()
    finally:
        if child.poll() is None:
            child.kill()
        for path in segments(prefix):
            path.unlink()
