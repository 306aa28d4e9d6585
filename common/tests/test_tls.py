"""TLS on a service's gRPC port (inferline.tls and the server bootstrap): served with a real
certificate authority's certificates (`make certs`), refused in the handshake without one."""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
import pytest
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc

from inferline.config import ConfigError
from inferline.server import start_server
from inferline.tls import require_tls, server_tls
from inferline_stack import certs


@dataclass(frozen=True)
class Settings:
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    port: int = 8090
    health_port: int = 0


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> certs.Certs:
    return certs.ensure(tmp_path_factory.mktemp("certs"))


def mtls(made: certs.Certs) -> Settings:
    return Settings(str(made.cert("preprocess")), str(made.key("preprocess")), str(made.ca))


async def check(port: int, credentials: grpc.ChannelCredentials | None) -> int:
    address = f"localhost:{port}"
    channel = (
        grpc.aio.insecure_channel(address)
        if credentials is None
        else grpc.aio.secure_channel(address, credentials)
    )
    async with channel:
        request = health_pb2.HealthCheckRequest(service="")
        reply = await health_pb2_grpc.HealthStub(channel).Check(request, timeout=10)
        return int(reply.status)


async def test_tls_without_a_ca_serves_any_client_that_trusts_it(made: certs.Certs) -> None:
    settings = Settings(str(made.cert("preprocess")), str(made.key("preprocess")))
    running = await start_server("unit", 0, [], [], host="127.0.0.1", tls=server_tls(settings))
    try:
        trusting = grpc.ssl_channel_credentials(made.ca.read_bytes())
        assert await check(running.port, trusting) == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as plaintext:
            await check(running.port, None)
        assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await running.stop(0)


async def test_mtls_refuses_a_client_without_a_certificate(made: certs.Certs) -> None:
    running = await start_server("unit", 0, [], [], host="127.0.0.1", tls=server_tls(mtls(made)))
    ca = made.ca.read_bytes()
    client = (made.key(certs.CLIENT).read_bytes(), made.cert(certs.CLIENT).read_bytes())
    try:
        with pytest.raises(grpc.aio.AioRpcError) as anonymous:
            await check(running.port, grpc.ssl_channel_credentials(ca))
        assert anonymous.value.code() == grpc.StatusCode.UNAVAILABLE
        envoy = grpc.ssl_channel_credentials(ca, *client)
        assert await check(running.port, envoy) == health_pb2.HealthCheckResponse.SERVING
    finally:
        await running.stop(0)


async def test_mtls_refuses_a_certificate_another_ca_signed(
    made: certs.Certs, tmp_path: Path
) -> None:
    other = certs.ensure(tmp_path / "other")
    running = await start_server("unit", 0, [], [], host="127.0.0.1", tls=server_tls(mtls(made)))
    pair = (other.key(certs.CLIENT).read_bytes(), other.cert(certs.CLIENT).read_bytes())
    try:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await check(running.port, grpc.ssl_channel_credentials(made.ca.read_bytes(), *pair))
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await running.stop(0)


async def test_the_health_port_answers_a_plaintext_probe_and_nothing_else(
    made: certs.Certs,
) -> None:
    """What a kubelet's gRPC probe (no certificate) reaches while the service port is mTLS: the
    same statuses, and only grpc.health.v1 (reflection, the service itself: UNIMPLEMENTED)."""
    running = await start_server(
        "unit", 0, [], ["example.Service"], host="127.0.0.1", tls=server_tls(mtls(made)),
        health_port=0,
    )  # fmt: skip
    try:
        assert running.probe_port not in (0, running.port)
        assert await check(running.probe_port, None) == health_pb2.HealthCheckResponse.SERVING
        async with grpc.aio.insecure_channel(f"127.0.0.1:{running.probe_port}") as channel:
            method = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
            reflection = channel.stream_stream(method)
            with pytest.raises(grpc.aio.AioRpcError) as other:
                async for _ in reflection(iter([b""]), timeout=10):
                    pass
            assert other.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.aio.AioRpcError) as plaintext:
            await check(running.port, None)
        assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE
        await running.set_serving(False)  # draining: the probe sees it too
        assert await check(running.probe_port, None) == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        await running.stop(0)
    with pytest.raises(grpc.aio.AioRpcError) as stopped:
        await check(running.probe_port, None)
    assert stopped.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_health_port_in_use_fails_startup_naming_it(made: certs.Certs) -> None:
    first = await start_server("unit", 0, [], [], host="127.0.0.1", health_port=0)
    try:
        with pytest.raises(OSError, match=f"second: cannot answer health checks on 127.0.0.1:"
                                          f"{first.probe_port}"):  # fmt: skip
            await start_server("second", 0, [], [], host="127.0.0.1",
                               health_port=first.probe_port)  # fmt: skip
    finally:
        await first.stop(0)


def mount(secret: Path, made: certs.Certs, version: str) -> None:
    """cert-manager's Secret as the kubelet mounts it (tls.crt, tls.key, ca.crt through a
    ``..data`` link to a versioned directory, swapped by a rename on renewal)."""
    versioned = secret / version
    versioned.mkdir(parents=True)
    files = {"tls.crt": made.cert("middleman"), "tls.key": made.key("middleman"), "ca.crt": made.ca}
    for name, source in files.items():
        (versioned / name).write_bytes(source.read_bytes())
    staging = secret / "..data_tmp"
    staging.symlink_to(version)
    staging.replace(secret / "..data")
    for name in files:
        if not (secret / name).is_symlink():
            (secret / name).symlink_to(Path("..data") / name)


def mounted(secret: Path) -> Settings:
    return Settings(str(secret / "tls.crt"), str(secret / "tls.key"), str(secret / "ca.crt"))


def client_of(made: certs.Certs) -> grpc.ChannelCredentials:
    pair = (made.key(certs.CLIENT).read_bytes(), made.cert(certs.CLIENT).read_bytes())
    return grpc.ssl_channel_credentials(made.ca.read_bytes(), *pair)


async def test_a_renewed_certificate_is_served_without_a_restart(tmp_path: Path) -> None:
    """The gRPC port, after cert-manager renewed the Secret (here with a new CA, so a client can
    tell): the next connection gets the new certificate and is checked against the new CA."""
    first, renewed = certs.ensure(tmp_path / "first"), certs.ensure(tmp_path / "renewed")
    secret = tmp_path / "secret"
    mount(secret, first, "..v1")
    settings = mounted(secret)
    running = await start_server("unit", 0, [], [], host="127.0.0.1", tls=server_tls(settings))
    try:
        assert await check(running.port, client_of(first)) == health_pb2.HealthCheckResponse.SERVING
        mount(secret, renewed, "..v2")
        assert (
            await check(running.port, client_of(renewed)) == health_pb2.HealthCheckResponse.SERVING
        )
        with pytest.raises(grpc.aio.AioRpcError) as old:  # the old CA's client: refused now
            await check(running.port, client_of(first))
        assert old.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await running.stop(0)


async def test_a_renewed_certificate_is_served_over_https_without_a_restart(
    tmp_path: Path,
) -> None:
    """The same for an HTTPS server (middleman's REST port) on ServerTls.ssl_context."""
    first, renewed = certs.ensure(tmp_path / "first"), certs.ensure(tmp_path / "renewed")
    secret = tmp_path / "secret"
    mount(secret, first, "..v1")
    tls = server_tls(mounted(secret))
    assert tls is not None

    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.ssl_context()).start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}/"

    async def get(made: certs.Certs) -> str:
        context = ssl.create_default_context(cafile=str(made.ca))
        context.load_cert_chain(str(made.cert(certs.CLIENT)), str(made.key(certs.CLIENT)))
        async with aiohttp.ClientSession() as session, session.get(url, ssl=context) as reply:
            return await reply.text()

    try:
        assert await get(first) == "ok"
        mount(secret, renewed, "..v2")
        assert await get(renewed) == "ok"
        with pytest.raises(aiohttp.ClientError):
            await get(first)
    finally:
        await runner.cleanup()


def test_no_settings_is_plaintext() -> None:
    require_tls(Settings(), "INFERLINE_UNIT")
    assert server_tls(Settings()) is None


def test_good_settings_pass(made: certs.Certs) -> None:
    require_tls(mtls(made), "INFERLINE_UNIT")
    tls = server_tls(mtls(made))
    assert tls is not None and tls.mutual


def test_bad_settings_fail_naming_the_variable(made: certs.Certs, tmp_path: Path) -> None:
    cert, key, ca = str(made.cert("preprocess")), str(made.key("preprocess")), str(made.ca)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    cases = {
        "INFERLINE_UNIT_TLS_KEY: TLS needs both": Settings(cert, ""),
        "INFERLINE_UNIT_TLS_CERT: TLS needs both": Settings("", key),
        "INFERLINE_UNIT_TLS_CA: client certificates": Settings("", "", ca),
        "INFERLINE_UNIT_TLS_CERT='/nope.crt': No such file": Settings("/nope.crt", key),
        "INFERLINE_UNIT_TLS_CA='/nope.crt': No such file": Settings(cert, key, "/nope.crt"),
        "INFERLINE_UNIT_TLS_CERT=.*: not a PEM certificate": Settings(str(garbage), key),
        "INFERLINE_UNIT_TLS_CA=.*: not PEM CA": Settings(cert, key, str(garbage)),
        "INFERLINE_UNIT_HEALTH_PORT=8090: must be a TCP port other than INFERLINE_UNIT_PORT": (
            Settings(cert, key, health_port=8090)
        ),
        "INFERLINE_UNIT_HEALTH_PORT=70000: must be a TCP port": Settings(health_port=70000),
    }
    for message, settings in cases.items():
        with pytest.raises(ConfigError, match=message):
            require_tls(settings, "INFERLINE_UNIT")
