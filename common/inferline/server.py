"""grpcio aio server bootstrap: health, reflection, per-RPC metrics, graceful stop on SIGTERM.

On SIGTERM or SIGINT every service is marked NOT_SERVING first (so load balancers stop sending
new work), then the server stops with a bounded grace period for the calls in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from inferline import timing, tracing
from inferline.capacity import INNER_MESSAGE_BYTES, STREAM_WINDOW_BYTES
from inferline.metrics import RpcMetrics
from inferline.tls import ServerTls

logger = logging.getLogger(__name__)

# One place for channel and server options: large tensors, keepalive that survives proxies.
# Messages up to the inner hops' limit by default (capacity.INNER_MESSAGE_BYTES); middleman's
# public one is in its own configuration.
# The most often a client may PING a server (Envoy's upstream keepalive sends one a second).
PING_INTERVAL_MS = 500


def server_options(max_message_bytes: int = INNER_MESSAGE_BYTES) -> list[tuple[str, int]]:
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        # Envoy PINGs every upstream connection each second to find a replica that hangs; a
        # gRPC server's default answers that with GOAWAY (too_many_pings) after two of them.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", PING_INTERVAL_MS),
        ("grpc.http2.max_ping_strikes", 0),
        ("grpc.so_reuseport", 0),
        # What a stream may have received and not yet read: a fixed window (inferline.capacity's
        # STREAM_WINDOW_BYTES), not gRPC's default that grows with the link's measured
        # bandwidth-delay product without bound.
        ("grpc.http2.bdp_probe", 0),
        ("grpc.http2.lookahead_bytes", STREAM_WINDOW_BYTES),
    ]


def channel_options(
    max_message_bytes: int = INNER_MESSAGE_BYTES, keepalive_ms: int = 30000
) -> list[tuple[str, int]]:
    """A PING each ``keepalive_ms``, the connection closed when one goes unanswered as long:
    what a call in flight on it learns of a server that hangs (UNAVAILABLE)."""
    return [
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", keepalive_ms),
        ("grpc.keepalive_timeout_ms", min(keepalive_ms, 20000)),
        ("grpc.http2.ping_timeout_ms", min(keepalive_ms, 20000)),  # what grpc 1.8x waits for
        ("grpc.keepalive_permit_without_calls", 1),
    ]


Register = Callable[[grpc.aio.Server], None]


@dataclass
class RunningServer:
    server: grpc.aio.Server
    health: health.aio.HealthServicer
    port: int
    service_names: tuple[str, ...]
    probe: grpc.aio.Server | None = None  # the plaintext health-only port, if any
    probe_port: int = 0

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING
            if serving
            else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for name in ("", *self.service_names):
            await self.health.set(name, status)

    async def stop(self, grace: float) -> None:
        """NOT_SERVING first, then stop, letting calls in flight finish within ``grace`` s."""
        await self.set_serving(False)
        await self.server.stop(grace)
        if self.probe is not None:
            await self.probe.stop(0)


async def start_server(
    name: str,
    port: int,
    register: Sequence[Register],
    service_names: Sequence[str],
    host: str = "0.0.0.0",
    max_message_bytes: int = INNER_MESSAGE_BYTES,
    tls: ServerTls | None = None,
    health_port: int | None = None,
    timing_as: str | None = None,
) -> RunningServer:
    """Start a server for ``name`` on ``port`` (0 picks a free one) and mark it SERVING;
    over TLS (mutual when ``tls`` names a CA) when ``tls`` is given.

    ``timing_as``: per-hop timing in each answer (:mod:`inferline.timing`): None, none; "", the
    parts measured beneath; a hop's name, its own total too, under that name.

    ``health_port``: a second, plaintext port that answers ``grpc.health.v1`` only, with the
    same statuses (0 picks one): what a kubelet's gRPC probe reaches while the service's own
    port asks every client for a certificate (it presents none)."""
    server = grpc.aio.server(
        interceptors=[
            *tracing.server_interceptors(),
            RpcMetrics(name),
            *(timing.server_interceptors(timing_as) if timing_as is not None else ()),
        ],
        options=server_options(max_message_bytes),
    )
    for add in register:
        add(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*service_names, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    credentials = None if tls is None else tls.grpc_credentials()
    bound = bind(server, host, port, credentials)
    if not bound:
        raise OSError(f"{name}: cannot listen on {host}:{port} (port in use?)")
    await server.start()
    running = RunningServer(server, health_servicer, bound, tuple(service_names))
    if health_port is not None:
        try:
            probe, probe_port = await start_probe(health_servicer, host, health_port)
        except OSError as exc:
            await server.stop(0)
            raise OSError(f"{name}: {exc}") from None
        running.probe, running.probe_port = probe, probe_port
    await running.set_serving(True)
    security = "plaintext" if tls is None else "mTLS" if tls.mutual else "TLS"
    logger.info("%s serving gRPC (%s) on %s:%d", name, security, host, bound)
    if running.probe is not None:
        logger.info("%s answering health checks (plaintext) on %s:%d", name, host,
                    running.probe_port)  # fmt: skip
    return running


async def start_probe(
    servicer: health.aio.HealthServicer, host: str, port: int
) -> tuple[grpc.aio.Server, int]:
    """A plaintext server with ``servicer`` (health only) on ``port``; and the port bound."""
    probe = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    health_pb2_grpc.add_HealthServicer_to_server(servicer, probe)
    bound = bind(probe, host, port)
    if not bound:
        raise OSError(f"cannot answer health checks on {host}:{port} (port in use?)")
    await probe.start()
    return probe, bound


def bind(
    server: grpc.aio.Server,
    host: str,
    port: int,
    credentials: grpc.ServerCredentials | None = None,
) -> int:
    """Listen on ``host:port`` (over TLS with ``credentials``); the port bound, 0 if it cannot
    (grpcio answers a port in use with 0 or, since 1.6x, a RuntimeError)."""
    address = f"{host}:{port}"
    try:
        if credentials is None:
            return int(server.add_insecure_port(address))
        return int(server.add_secure_port(address, credentials))
    except RuntimeError:
        return 0


async def wait_for_signal() -> signal.Signals:
    """Block until SIGTERM or SIGINT arrives; returns which."""
    loop = asyncio.get_running_loop()
    received: asyncio.Future[signal.Signals] = loop.create_future()

    def on_signal(sig: signal.Signals) -> None:
        if not received.done():
            received.set_result(sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        return await received
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(ValueError, RuntimeError):
                loop.remove_signal_handler(sig)


async def serve_until_signal(running: RunningServer, grace: float) -> None:
    sig = await wait_for_signal()
    logger.info("%s received: NOT_SERVING, stopping with %.1fs grace", sig.name, grace)
    await running.stop(grace)
    logger.info("stopped")
