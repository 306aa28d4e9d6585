"""Network faults with real network namespaces (issue 14): the real Envoy, rendered from the one
template, in front of real Triton replicas (PyTriton serving the *simulated* GPU model), each
replica in a network namespace of its own behind a veth pair; the control plane reads an
endpoints file and feeds Envoy over ADS. A closed-loop load (every request with a deadline of
:data:`DEADLINE_S`) goes through Envoy's Triton listener the whole time.

* black hole: one of two replicas loses every packet, both ways, with no reset (a pfifo of
  length 0 on each end of its veth). No request may fail (each deadline is far longer than
  the detection time); printed: how long until Envoy stops sending to it and the latency
  effect;
* latency: 200 ms more on one of two replicas (tc netem, or a user-space relay where the
  kernel has no netem). No request may fail; printed: p50/p99 before and during, and each
  replica's share (LEAST_REQUEST moves load away from the slow one);
* control plane cut off: the control plane in a namespace of its own is black-holed for
  :data:`CUT_S` while a replica is added and another drained in the endpoints file. Envoy
  keeps serving its last good endpoints (no failure, its view unchanged), and converges once
  the control plane is reachable again (printed: how long after).

A first, quick test checks the namespace helper itself (a black hole hangs a connection
without reset, yet TCP keepalive finds an idle one dead as on a real network, healing undoes
it, the relay delays, teardown leaves nothing).

Figures are printed (``-s``), not asserted; assertions are on failures and on convergence
within generous bounds. Needs root and iproute2 (skips without them; CI requires them).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from eds.cache import Endpoint, Health
from eds.sources import endpoints_file
from inferline_envoy import admin as envoy_admin
from inferline_stack import health
from inferline_stack.processes import kill_group
from inferline_testing import netns
from inferline_testing.harness import (
    EdsProcess,
    EnvoyProcess,
    Process,
    envoy_params,
    percentile,
    python,
)
from inferline_testing.ports import free_port
from inferline_testing.waits import wait_for, wait_for_state

pytestmark = pytest.mark.e2e

CLUSTER = "triton"
MODEL = "simulated_gpu"
CUT_S = 30.0  # how long the control plane is cut off (the 30 s)
DEADLINE_S = 10.0  # every request's own deadline (grpc-timeout)
DELAY_MS = 200.0
CONCURRENCY = 8
START_S = 120.0  # a Triton replica starting on a busy small machine
WAIT_S = 30.0  # generous bounds: only how long a broken run takes to fail
WINDOW = 300  # requests per measured phase


# -- the pieces -------------------------------------------------------------------------------


class Replica(Process):
    """A simulated-GPU Triton replica inside ``ns``, reached at the namespace's address."""

    def __init__(self, run_dir: Path, ns: netns.Namespace, name: str) -> None:
        self.ns, self.port = ns, free_port()
        # PyTriton's sockets live in its workspace: a short path (AF_UNIX allows 108 bytes).
        self.workspace = Path(tempfile.gettempdir()) / f"inferline-{name}-{ns.name}"
        argv = python(
            "inferline_models.triton",
            f"--model={MODEL}",
            "--address=0.0.0.0",  # the namespace's own loopback and veth: nothing else
            f"--grpc-port={self.port}",
            f"--http-port={free_port()}",
            f"--metrics-port={free_port()}",
            f"--workspace={self.workspace}",
        )
        env = {"INFERLINE_LOG_LEVEL": "WARNING"}
        super().__init__(name, ns.argv(argv), run_dir / "logs" / f"{name}.log", env)

    @property
    def address(self) -> str:
        return f"{self.ns.address}:{self.port}"

    def endpoint(self, health_: Health = Health.HEALTHY) -> Endpoint:
        return Endpoint(self.ns.address, self.port, health_, 1, "local", self.name)

    async def start_ready(self) -> None:
        await self.start()

        async def ready() -> bool:
            return await asyncio.to_thread(health.ready, self.address, MODEL)

        await wait_for(ready, START_S, f"{self.name} ready", abort=self.exited)

    async def stop(self, grace_s: float = 10.0) -> int | None:
        code = await super().stop(grace_s)
        if self.proc is not None:
            kill_group(self.proc.pid)  # PyTriton's Triton server, in the same group
        shutil.rmtree(self.workspace, ignore_errors=True)
        return code


@dataclass
class Outcome:
    start: float  # time.monotonic()
    end: float
    code: grpc.StatusCode

    @property
    def ok(self) -> bool:
        return bool(self.code == grpc.StatusCode.OK)

    @property
    def latency_ms(self) -> float:
        return (self.end - self.start) * 1000.0


@dataclass
class Load:
    """Closed-loop ModelInfer calls through Envoy, each with the deadline :data:`DEADLINE_S`."""

    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.ok]

    def since(self, start: float) -> list[Outcome]:
        """Those started at ``start`` or later."""
        return [o for o in self.outcomes if o.start >= start]

    def ended(self, moment: float) -> list[Outcome]:
        """Those that ended at ``moment`` or later (in flight then, or started since)."""
        return [o for o in self.outcomes if o.end >= moment]

    async def flowing(self, requests: int = 50, timeout_s: float = WAIT_S) -> None:
        target = len(self.outcomes) + requests
        await wait_for_state(lambda: len(self.outcomes) >= target, timeout_s, f"{requests} more")


def request() -> service_pb2.ModelInferRequest:
    image = np.zeros((1, 3, 224, 224), np.uint8)
    tensor = service_pb2.ModelInferRequest().InferInputTensor(
        name="INPUT", datatype="UINT8", shape=list(image.shape)
    )
    return service_pb2.ModelInferRequest(
        model_name=MODEL, inputs=[tensor], raw_input_contents=[image.tobytes()]
    )


@contextlib.asynccontextmanager
async def load(target: str) -> AsyncIterator[Load]:
    recorder, stop = Load(), asyncio.Event()
    message = request()

    async def worker(stub: service_pb2_grpc.GRPCInferenceServiceStub) -> None:
        while not stop.is_set():
            start = time.monotonic()
            try:
                await stub.ModelInfer(message, timeout=DEADLINE_S)
                code = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
            recorder.outcomes.append(Outcome(start, time.monotonic(), code))

    async with grpc.aio.insecure_channel(target) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        tasks = [asyncio.create_task(worker(stub)) for _ in range(CONCURRENCY)]
        try:
            yield recorder
        finally:
            stop.set()
            await asyncio.gather(*tasks)  # each finishes its call: within its deadline


@dataclass
class Rig:
    run_dir: Path
    endpoints: Path
    eds: EdsProcess
    envoy: EnvoyProcess

    @property
    def admin(self) -> str:
        return self.envoy.admin

    async def host(self, address: str, port: int) -> envoy_admin.HostStatus | None:
        hosts = (await envoy_admin.clusters(self.admin)).get(CLUSTER, [])
        return next((h for h in hosts if h.key == (address, port)), None)

    async def announce(self, *replicas: Replica) -> None:
        for replica in replicas:
            endpoints_file.set_endpoint(self.endpoints, CLUSTER, replica.endpoint())
        for replica in replicas:
            await envoy_admin.wait_routable(
                self.admin, CLUSTER, replica.ns.address, replica.port, WAIT_S
            )


@contextlib.contextmanager
def namespaces(*labels: str) -> Iterator[list[netns.Namespace]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(netns.namespace(label)) for label in labels]


@contextlib.asynccontextmanager
async def rig(tmp_path: Path, eds_ns: netns.Namespace | None = None) -> AsyncIterator[Rig]:
    """The control plane (in ``eds_ns`` if given) and Envoy with a Triton listener."""
    endpoints = tmp_path / "endpoints.yaml"
    endpoints_file.write(endpoints, {CLUSTER: []})
    if eds_ns is None:
        eds = EdsProcess(tmp_path, endpoints, [CLUSTER])
    else:
        eds = EdsProcess(
            tmp_path, endpoints, [CLUSTER], host=eds_ns.address, prefix=eds_ns.argv([])
        )
    envoy = EnvoyProcess(tmp_path, envoy_params(eds.port, [CLUSTER], xds_host=eds.host))
    try:
        await eds.start_ready()
        await envoy.start_ready()
        yield Rig(tmp_path, endpoints, eds, envoy)
    finally:
        await envoy.stop(5.0)
        await eds.stop(5.0)


async def start(*replicas: Replica) -> None:
    await asyncio.gather(*(r.start_ready() for r in replicas))


def latencies(outcomes: list[Outcome]) -> str:
    ms = [o.latency_ms for o in outcomes if o.ok]
    return f"p50 {percentile(ms, 50):.0f} ms, p99 {percentile(ms, 99):.0f} ms"


# -- the tests --------------------------------------------------------------------------------


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


async def test_black_holed_replica_costs_no_request(tmp_path: Path) -> None:
    """One of two replicas black-holed under load: Envoy's health checks fail it, its
    connections are closed, what was in flight there is retried on the other: nothing fails."""
    with namespaces("bh-a", "bh-b") as (ns_a, ns_b):
        a, b = Replica(tmp_path, ns_a, "triton-a"), Replica(tmp_path, ns_b, "triton-b")
        try:
            await start(a, b)
            async with rig(tmp_path) as r:
                await r.announce(a, b)
                async with load(r.envoy.listener(CLUSTER)) as traffic:
                    await traffic.flowing(WINDOW)
                    before = list(traffic.outcomes)
                    faulted = time.monotonic()
                    ns_b.black_hole()
                    last_total, last_sent, detected = -1, faulted, None

                    async def settled() -> bool:
                        nonlocal last_total, last_sent, detected
                        host = await r.host(ns_b.address, b.port)
                        assert host is not None
                        now = time.monotonic()
                        if host.rq_total != last_total:
                            last_total, last_sent = host.rq_total, now
                        if detected is None and not host.routable:
                            detected = now
                        return detected is not None and host.in_flight == 0

                    await wait_for(settled, WAIT_S, "Envoy done with the black-holed replica")
                    await traffic.flowing(WINDOW)  # and the load carries on on the other
                    after = traffic.ended(faulted)
                assert detected is not None
                b_host = await r.host(ns_b.address, b.port)
                retries = await envoy_admin.stats(
                    r.admin, rf"^cluster\.{CLUSTER}\.upstream_rq_retry$"
                )
                ns_b.heal()
                healed = time.monotonic()
                await envoy_admin.wait_routable(r.admin, CLUSTER, ns_b.address, b.port, WAIT_S)
                back = time.monotonic()
        finally:
            await asyncio.gather(a.stop(), b.stop())
    slowest = max((o.latency_ms for o in after if o.ok), default=0.0)
    print(
        f"\nblack hole: {len(traffic.outcomes)} requests, {len(traffic.failed)} failed "
        f"(deadline {DEADLINE_S:g} s); Envoy marked the replica unhealthy "
        f"{detected - faulted:.2f} s after the fault, sent it its last request "
        f"{last_sent - faulted:.2f} s after, nothing in flight to it "
        f"(its flags {b_host.flags if b_host else None}); retries {retries}; "
        f"before {latencies(before)}, from the fault {latencies(after)} "
        f"(slowest {slowest:.0f} ms); healed, routable again {back - healed:.1f} s after"
    )
    assert not traffic.failed, f"failed: {[(o.code, round(o.latency_ms)) for o in traffic.failed]}"


async def test_slow_replica_costs_no_request(tmp_path: Path) -> None:
    """200 ms more latency to one of two replicas: nothing fails; LEAST_REQUEST sends the slow
    one less (the figures say how much)."""
    use_netem = netns.netem_available()
    with namespaces("lat-a", "lat-b") as (ns_a, ns_b):
        a, b = Replica(tmp_path, ns_a, "triton-a"), Replica(tmp_path, ns_b, "triton-b")
        relay = None if use_netem else netns.DelayRelay(ns_b.address, b.port)
        try:
            await start(a, b)
            if relay is not None:
                await relay.start()
                b_endpoint = Endpoint("127.0.0.1", relay.port, Health.HEALTHY, 1, "local", b.name)
            else:
                b_endpoint = b.endpoint()
            async with rig(tmp_path) as r:
                endpoints_file.set_endpoint(r.endpoints, CLUSTER, b_endpoint)
                await r.announce(a)
                await envoy_admin.wait_routable(
                    r.admin, CLUSTER, b_endpoint.address, b_endpoint.port, WAIT_S
                )

                async def shares() -> tuple[int, int]:
                    ha = await r.host(ns_a.address, a.port)
                    hb = await r.host(b_endpoint.address, b_endpoint.port)
                    assert ha is not None and hb is not None
                    return ha.rq_total, hb.rq_total

                async with load(r.envoy.listener(CLUSTER)) as traffic:
                    await traffic.flowing(50)  # warm
                    start0, counts0 = time.monotonic(), await shares()
                    await traffic.flowing(WINDOW)
                    slowed, counts1 = time.monotonic(), await shares()
                    if relay is not None:
                        relay.delay_ms = DELAY_MS
                    else:
                        ns_b.delay(DELAY_MS)
                    await traffic.flowing(WINDOW)
                    counts2 = await shares()
                    before = [o for o in traffic.since(start0) if o.start < slowed]
                    during = traffic.since(slowed)
        finally:
            if relay is not None:
                await relay.close()
            await asyncio.gather(a.stop(), b.stop())
    share = [(c1 - c0, c2 - c1) for c0, c1, c2 in zip(counts0, counts1, counts2, strict=True)]
    how = "tc netem" if use_netem else "a user-space relay (this kernel has no sch_netem)"
    print(
        f"\n+{DELAY_MS:g} ms on one replica ({how}): {len(traffic.outcomes)} requests, "
        f"{len(traffic.failed)} failed; before {latencies(before)}, during {latencies(during)}; "
        f"requests to (fast, slow) replica: before {share[0][0]}/{share[1][0]}, "
        f"during {share[0][1]}/{share[1][1]}"
    )
    assert not traffic.failed, f"failed: {[(o.code, round(o.latency_ms)) for o in traffic.failed]}"
    (_, fast_during), (_, slow_during) = share
    assert slow_during < fast_during, share  # LEAST_REQUEST sent the slow replica less


async def test_control_plane_cut_off(tmp_path: Path) -> None:
    """The control plane unreachable for :data:`CUT_S` while a replica is added and another
    drained: Envoy serves its last good endpoints meanwhile and converges once it is back."""
    with namespaces("cp-eds", "cp-a", "cp-b", "cp-c") as (ns_eds, ns_a, ns_b, ns_c):
        a = Replica(tmp_path, ns_a, "triton-a")
        b = Replica(tmp_path, ns_b, "triton-b")
        c = Replica(tmp_path, ns_c, "triton-c")
        try:
            await start(a, b, c)
            async with rig(tmp_path, eds_ns=ns_eds) as r:
                await r.announce(a, b)

                async def view() -> dict[tuple[str, int], str]:
                    hosts = (await envoy_admin.clusters(r.admin)).get(CLUSTER, [])
                    return {h.key: h.state for h in hosts}

                async def connected() -> bool:
                    stats = await envoy_admin.stats(r.admin, r"^control_plane\.connected_state$")
                    return stats.get("control_plane.connected_state") == 1

                async with load(r.envoy.listener(CLUSTER)) as traffic:
                    await traffic.flowing(WINDOW)
                    good = await view()
                    ns_eds.black_hole()
                    cut = time.monotonic()
                    endpoints_file.set_endpoint(r.endpoints, CLUSTER, c.endpoint())
                    endpoints_file.set_health(
                        r.endpoints, CLUSTER, ns_b.address, b.port, Health.DRAINING
                    )
                    views, lost = set(), None
                    while time.monotonic() - cut < CUT_S:  # the fault's duration, watched
                        views.add(tuple(sorted((await view()).items())))
                        if lost is None and not await connected():
                            lost = time.monotonic()
                        await asyncio.sleep(0.5)
                    during = traffic.since(cut)
                    ns_eds.heal()
                    healed = time.monotonic()

                    async def converged() -> bool:
                        hb = await r.host(ns_b.address, b.port)
                        hc = await r.host(ns_c.address, c.port)
                        return bool(
                            hc is not None and hc.routable
                            and hb is not None and hb.eds_health == "DRAINING"
                        )  # fmt: skip

                    await wait_for(connected, 60.0, "Envoy reconnected to the control plane")
                    reconnected = time.monotonic()
                    await wait_for(converged, WAIT_S, "Envoy has the new endpoints")
                    done = time.monotonic()
                    await envoy_admin.wait_drained(r.admin, CLUSTER, ns_b.address, b.port, WAIT_S)
                    await b.stop()
                    endpoints_file.remove_endpoint(r.endpoints, CLUSTER, ns_b.address, b.port)
                    await envoy_admin.wait_gone(r.admin, CLUSTER, ns_b.address, b.port, WAIT_S)
                    c_before = (await r.host(ns_c.address, c.port)).rq_total  # type: ignore[union-attr]
                    await traffic.flowing(WINDOW)
                    c_after = (await r.host(ns_c.address, c.port)).rq_total  # type: ignore[union-attr]
        finally:
            await asyncio.gather(a.stop(), b.stop(), c.stop())
    lost_text = f"{lost - cut:.1f} s into the cut" if lost is not None else "not within the cut"
    print(
        f"\ncontrol plane cut off {CUT_S:g} s: {len(traffic.outcomes)} requests, "
        f"{len(traffic.failed)} failed ({len(during)} during the cut, "
        f"{sum(not o.ok for o in during)} failed); Envoy's view during the cut: "
        f"{len(views)} distinct (the last good one: {sorted(good.items())}); Envoy saw the "
        f"control plane gone {lost_text}; reconnected {reconnected - healed:.1f} s after the "
        f"network came back, had the new endpoints {done - healed:.1f} s after; the new "
        f"replica served {c_after - c_before} of the next {WINDOW} requests"
    )
    assert views == {tuple(sorted(good.items()))}, f"Envoy's view changed while cut off: {views}"
    assert not traffic.failed, f"failed: {[(o.code, round(o.latency_ms)) for o in traffic.failed]}"
    assert c_after > c_before
