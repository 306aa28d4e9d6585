import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY

from inferline.server import start_server


async def test_health_serving_then_not_serving_on_stop() -> None:
    running = await start_server("unit", 0, [], ["example.Service"])
    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", "example.Service"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=name))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        await running.set_serving(False)
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
    await running.stop(0)


async def pong(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
    return request


def add_ping(server: grpc.aio.Server) -> None:
    ping = grpc.unary_unary_rpc_method_handler(pong)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("x.Ping", {"Ping": ping}),)
    )


def pings_counted() -> float:
    """Pings answered OK so far, as the process's ``inferline_shared_grpc`` counter says (the
    default registry: what /metrics serves)."""
    labels = {"method": "Ping", "model": "", "code": "OK"}
    return REGISTRY.get_sample_value("inferline_shared_grpc_requests_total", labels) or 0.0


async def test_two_servers_in_one_process_share_rpc_metrics() -> None:
    first = await start_server("shared", 0, [add_ping], [])
    second = await start_server("shared", 0, [add_ping], [])  # no duplicate-collector error
    before = pings_counted()
    try:
        for running, pings in ((first, 2), (second, 3)):
            async with grpc.aio.insecure_channel(f"127.0.0.1:{running.port}") as channel:
                for _ in range(pings):
                    assert await channel.unary_unary("/x.Ping/Ping")(b"hi") == b"hi"
        assert pings_counted() - before == 5  # one counter holds both servers' calls
    finally:
        await first.stop(0)
        await second.stop(0)
