"""Network namespaces for network-fault tests: a process behind a veth pair, and faults on it.

A :class:`Namespace` is a fresh network namespace (``ip netns``, Debian's iproute2) joined to
the root namespace by a veth pair on a private /30 of its own: ``10.200.N.1`` on the root
side, ``10.200.N.2`` (:attr:`Namespace.address`) inside. A process started with
:meth:`Namespace.argv` (``ip netns exec NAME …``) listens there, and the root namespace (Envoy,
the test) reaches it only through the veth, where faults apply:

* :meth:`Namespace.black_hole`: every packet lost in both directions, inside the namespace:
  what arrives is dropped by a ``blackhole`` routing rule on its end of the veth, what it
  sends by a ``pfifo`` qdisc of length 0. Nothing answers, nothing is reset: connections hang
  as they would to a host that lost power or a partitioned network. Nothing changes on the
  root side, so its sockets (Envoy, the test) see their packets leave and vanish, as in a real
  network: a drop in their own qdisc would be a local one, which Linux TCP retries without end
  and never counts towards keepalive or ``TCP_USER_TIMEOUT``, so a connection that had sent
  its last request would never be found dead. Both ends also get a permanent neighbour entry,
  so that no failed ARP turns the hole into a fast "no route to host";
* :meth:`Namespace.delay`: ``tc netem delay`` on both ends (each adds half, so the round trip
  grows by ``ms``); :class:`NetemMissing` where the kernel has no ``sch_netem``;
* :meth:`Namespace.heal`: the faults removed.

Where the kernel has no ``sch_netem`` (some VM kernels ship without it), :class:`DelayRelay`
adds the latency in user space instead: a TCP relay in front of the namespace's address that
holds every chunk for half the delay in each direction.

:meth:`Namespace.delete` kills every process left in the namespace and deletes it (the veth
goes with it). :func:`namespace` does it all around a ``with`` block, also on failure.

Needs root and ``ip``/``tc``: :func:`require` skips a test without them, or fails it where
``INFERLINE_REQUIRE_TOOLS=1`` (CI).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Iterator, Sequence

from inferline_testing import tools

SUBNET_PREFIX = "10.200"
_counter = itertools.count()


class NetemMissing(RuntimeError):
    """The kernel has no ``sch_netem`` (tc qdisc netem): latency cannot be added in the kernel."""


def require() -> None:
    """Skip (or, in CI, fail) unless this process can create namespaces: root, ``ip``, ``tc``."""
    if os.geteuid() != 0:
        tools.missing("network-namespace tests need root (ip netns, veth, tc)")
    tools.tool("ip", "apt-get install iproute2")
    tools.tool("tc", "apt-get install iproute2")


def _run(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    if check and result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {result.returncode}: {result.stderr.strip()}")
    return result


def _used_subnets() -> set[int]:
    """The N of every 10.200.N.x address on this machine (other runs' namespaces)."""
    out = _run(["ip", "-o", "-4", "addr", "show"]).stdout
    prefix = re.escape(SUBNET_PREFIX)
    return {int(m) for m in re.findall(rf"\b{prefix}\.(\d+)\.\d+/", out)}


def _mac(argv_prefix: Sequence[str], device: str) -> str:
    out = _run([*argv_prefix, "ip", "-o", "link", "show", "dev", device]).stdout
    match = re.search(r"link/ether ([0-9a-f:]{17})", out)
    if match is None:
        raise RuntimeError(f"no MAC address for {device}: {out!r}")
    return match.group(1)


_HOLE_RULE = 10  # the black hole's routing rule, before the local table's (moved to 100)
_LOCAL_RULE = 100


class Namespace:
    """A network namespace behind a veth pair; see the module docstring."""

    def __init__(self, label: str = "ns") -> None:
        tag = f"{os.getpid() % 100000}{next(_counter)}"
        self.name = f"inferline-{label}-{tag}"
        self.host_dev = f"ilh{tag}"[:15]  # interface names: 15 characters at most
        self.ns_dev = f"iln{tag}"[:15]
        self.subnet = 0
        self.created = False

    @property
    def host_address(self) -> str:
        """The root namespace's end of the veth."""
        return f"{SUBNET_PREFIX}.{self.subnet}.1"

    @property
    def address(self) -> str:
        """The namespace's end of the veth: where its processes are reached."""
        return f"{SUBNET_PREFIX}.{self.subnet}.2"

    @property
    def _inside(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def argv(self, command: Sequence[str]) -> list[str]:
        """``command`` run inside the namespace."""
        return [*self._inside, *command]

    def create(self) -> None:
        free = sorted(set(range(1, 255)) - _used_subnets())
        if not free:
            raise RuntimeError(f"no free {SUBNET_PREFIX}.N.0/30 subnet")
        self.subnet = free[(os.getpid() + next(_counter)) % len(free)]
        _run(["ip", "netns", "add", self.name])
        self.created = True
        _run(["ip", "link", "add", self.host_dev, "type", "veth", "peer", "name", self.ns_dev])
        _run(["ip", "link", "set", self.ns_dev, "netns", self.name])
        _run(["ip", "addr", "add", f"{self.host_address}/30", "dev", self.host_dev])
        _run(["ip", "link", "set", self.host_dev, "up"])
        _run([*self._inside, "ip", "addr", "add", f"{self.address}/30", "dev", self.ns_dev])
        _run([*self._inside, "ip", "link", "set", self.ns_dev, "up"])
        _run([*self._inside, "ip", "link", "set", "lo", "up"])
        # The local table's rule after the black hole's (a rule cannot come before priority 0).
        _run([*self._inside, "ip", "rule", "add", "pref", str(_LOCAL_RULE), "lookup", "local"])
        _run([*self._inside, "ip", "rule", "del", "pref", "0"])
        # Permanent neighbours: a black hole stays a black hole (no ARP to fail).
        host_mac, ns_mac = _mac([], self.host_dev), _mac(self._inside, self.ns_dev)
        _run(["ip", "neigh", "replace", self.address, "lladdr", ns_mac, "dev", self.host_dev,
              "nud", "permanent"])  # fmt: skip
        _run([*self._inside, "ip", "neigh", "replace", self.host_address, "lladdr", host_mac,
              "dev", self.ns_dev, "nud", "permanent"])  # fmt: skip

    def _qdisc(self, *spec: str) -> None:
        _run(["tc", "qdisc", "replace", "dev", self.host_dev, "root", *spec])
        _run([*self._inside, "tc", "qdisc", "replace", "dev", self.ns_dev, "root", *spec])

    def black_hole(self) -> None:
        """Lose every packet both ways, silently (no reset, no ICMP), inside the namespace."""
        _run([*self._inside, "ip", "rule", "add", "pref", str(_HOLE_RULE), "iif", self.ns_dev,
              "blackhole"])  # fmt: skip
        _run([*self._inside, "tc", "qdisc", "replace", "dev", self.ns_dev, "root", "pfifo",
              "limit", "0"])  # fmt: skip

    def delay(self, ms: float) -> None:
        """Add ``ms`` to every round trip (``ms``/2 each way, tc netem)."""
        try:
            self._qdisc("netem", "delay", f"{ms / 2:g}ms")
        except RuntimeError as exc:
            if "unknown" in str(exc).lower() or "not supported" in str(exc).lower():
                raise NetemMissing(f"tc netem is not available in this kernel: {exc}") from exc
            raise

    def heal(self) -> None:
        """Remove the faults: no black-hole rule, the default qdisc on both ends."""
        _run([*self._inside, "ip", "rule", "del", "pref", str(_HOLE_RULE)], check=False)
        _run(["tc", "qdisc", "del", "dev", self.host_dev, "root"], check=False)
        _run([*self._inside, "tc", "qdisc", "del", "dev", self.ns_dev, "root"], check=False)

    def pids(self) -> list[int]:
        out = _run(["ip", "netns", "pids", self.name], check=False).stdout
        return [int(p) for p in out.split()]

    def gone(self) -> bool:
        """Neither the namespace nor the root end of its veth exists (any more)."""
        listed = _run(["ip", "netns", "list"]).stdout.split()
        link = _run(["ip", "link", "show", "dev", self.host_dev], check=False)
        return self.name not in listed and link.returncode != 0

    def delete(self) -> None:
        """Kill whatever still runs inside, delete the namespace and the veth pair."""
        if not self.created:
            return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        _run(["ip", "netns", "del", self.name], check=False)
        _run(["ip", "link", "del", self.host_dev], check=False)  # gone with the namespace
        self.created = False


@contextlib.contextmanager
def namespace(label: str = "ns") -> Iterator[Namespace]:
    """A created :class:`Namespace`, deleted when the block ends (also on failure)."""
    require()
    ns = Namespace(label)
    try:
        ns.create()
        yield ns
    finally:
        ns.delete()


def netem_available() -> bool:
    """Whether ``tc qdisc … netem`` works here (the kernel has sch_netem)."""
    return shutil.which("tc") is not None and _netem_probe()


def _netem_probe() -> bool:
    with namespace("netem") as ns:
        try:
            ns.delay(1)
        except NetemMissing:
            return False
    return True


class DelayRelay:
    """A TCP relay on loopback to ``target`` that holds every chunk ``delay_ms / 2`` in each
    direction (order kept): :meth:`Namespace.delay` in user space, where there is no netem.

    ``delay_ms`` may change while it runs; 0 relays at once.
    """

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.delay_ms = 0.0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            self._tasks.discard(task)
            return
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (writer, up_writer):
                w.close()
            self._tasks.discard(task)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    with contextlib.suppress(OSError):
                        sink.write_eof()
                    return
                await asyncio.sleep(max(0.0, due - loop.time()))
                sink.write(data)
                await sink.drain()

        sender = asyncio.create_task(send())
        try:
            while True:
                data = await source.read(1 << 16)
                queue.put_nowait((loop.time() + self.delay_ms / 2000.0, data))
                if not data:
                    break
            await sender
        finally:
            sender.cancel()
