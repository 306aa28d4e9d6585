import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

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


async def test_two_servers_in_one_process_share_rpc_metrics() -> None:
    first = await start_server("unit", 0, [], [])
    second = await start_server("unit", 0, [], [])  # no duplicate-collector error
    assert first.port != second.port
    await first.stop(0)
    await second.stop(0)
