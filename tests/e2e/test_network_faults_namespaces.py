"""The network namespace helper itself (issue 14), first and quick: a process in a namespace is
reached at its address; a black hole hangs a connection without reset, yet TCP keepalive finds an
idle one dead as on a real network; healing undoes it; the relay delays; teardown leaves
nothing. Needs root and iproute2 (skips without them; CI requires them).
"""

from __future__ import annotations

import asyncio
import errno
import socket
import sys
import time
from pathlib import Path

import pytest

from inferline_testing import netns
from inferline_testing.harness import Process
from inferline_testing.ports import free_port
from inferline_testing.waits import wait_for

from .network_faults import DELAY_MS, WAIT_S

# One worker at a time changes the machine's routing rules (inferline_testing.netns).
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("netns")]


ECHO = """
import socket, sys, threading
def serve(conn):
    with conn:
        while data := conn.recv(99):
            conn.sendall(data)
server = socket.create_server(("0.0.0.0", int(sys.argv[1])))
while True:
    threading.Thread(target=serve, args=(server.accept()[0],), daemon=True).start()
"""


async def echo(address: str, port: int, timeout_s: float = 1.0) -> bytes:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(address, port), timeout_s)
    try:
        writer.write(b"ping")
        return await asyncio.wait_for(reader.read(99), timeout_s)
    finally:
        writer.close()


async def test_namespace_faults_and_teardown(tmp_path: Path) -> None:
    """The helper itself: a process in a namespace is reached at its address; a black hole
    makes a connection hang (no reset, no ICMP) but lets keepalive find an idle one dead,
    healing undoes it, the relay adds its delay,
    and deleting the namespace leaves neither it, its veth nor its process."""
    port = free_port()
    with netns.namespace("helper") as ns:
        server = Process("echo", ns.argv(python_c(ECHO, str(port))), tmp_path / "echo.log", {})
        await server.start()
        await wait_for(lambda: replies(ns.address, port), WAIT_S, "echo", abort=server.exited)
        held = await asyncio.to_thread(kept_alive, ns.address, port)
        ns.black_hole()
        with pytest.raises(TimeoutError):  # hangs: neither refused nor unreachable
            await echo(ns.address, port)
        # The hole is in the network, not in the sender's kernel: an idle connection's
        # keepalive probes leave and go unanswered, so the kernel closes it.
        dead_s = await asyncio.to_thread(seconds_until_dead, held, WAIT_S)
        print(f"\nblack hole: an idle kept-alive connection closed after {dead_s:.1f} s")
        ns.heal()
        assert await echo(ns.address, port) == b"ping"
        relay = netns.DelayRelay(ns.address, port)
        await relay.start()
        try:
            relay.delay_ms = DELAY_MS
            started = time.monotonic()
            assert await echo("127.0.0.1", relay.port) == b"ping"
            assert time.monotonic() - started >= DELAY_MS / 1000.0
        finally:
            await relay.close()
        assert ns.pids()
    assert await asyncio.to_thread(ns.gone)
    assert await server.proc.wait() is not None  # type: ignore[union-attr]  # killed with it


def kept_alive(address: str, port: int) -> socket.socket:
    """A connection with Envoy's upstream settings (TCP keepalive after 1 s idle, every 1 s,
    2 probes; TCP_USER_TIMEOUT 2 s) that has had its answer and now waits, idle."""
    sock = socket.create_connection((address, port), timeout=WAIT_S)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 2)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 2000)
    sock.sendall(b"ping")
    assert sock.recv(99) == b"ping"
    return sock


def seconds_until_dead(sock: socket.socket, limit_s: float) -> float:
    """How long until the kernel gives up on ``sock`` (ETIMEDOUT); fails after ``limit_s``."""
    started = time.monotonic()
    sock.settimeout(limit_s)
    with sock:
        try:
            got = sock.recv(99)
        except TimeoutError as exc:
            assert exc.errno == errno.ETIMEDOUT, f"connection still open after {limit_s:g} s"
            return time.monotonic() - started
    raise AssertionError(f"expected ETIMEDOUT, the connection answered {got!r}")


async def replies(address: str, port: int) -> bool:
    try:
        return await echo(address, port) == b"ping"
    except (OSError, TimeoutError):
        return False


def python_c(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]
