"""The public listener's certificate from a watched SDS file (k8s/components/tls): the real
Envoy serves it, and serves the next one once the certificate's directory is swapped the way
the kubelet updates a mounted Secret (cert-manager's renewal), with no restart."""

from __future__ import annotations

import asyncio
import dataclasses
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from eds.sources import endpoints_file
from inferline_envoy.sds import write_sds
from inferline_stack import certs
from inferline_testing.harness import EdsProcess, EnvoyProcess, envoy_params
from inferline_testing.waits import wait_for

pytestmark = pytest.mark.e2e


def mount(secret_dir: Path, made: certs.Certs, version: str) -> None:
    """A Secret volume as the kubelet writes it: files in a versioned directory, ``..data``
    pointing at it (swapped atomically by a rename), ``tls.crt`` and ``tls.key`` through it."""
    versioned = secret_dir / version
    versioned.mkdir()
    (versioned / "tls.crt").write_bytes(made.cert(certs.PUBLIC).read_bytes())
    (versioned / "tls.key").write_bytes(made.key(certs.PUBLIC).read_bytes())
    staging = secret_dir / "..data_tmp"
    staging.symlink_to(version)
    staging.replace(secret_dir / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (secret_dir / name).is_symlink():
            (secret_dir / name).symlink_to(Path("..data") / name)


def served_certificate(address: tuple[str, int], ca: Path) -> str:
    """The certificate the listener presents, after a handshake that trusts ``ca``."""
    return ssl.get_server_certificate(address, ca_certs=str(ca), timeout=5)


@pytest.fixture
async def envoy(tmp_path: Path) -> AsyncIterator[tuple[EnvoyProcess, Path]]:
    secret = tmp_path / "secret"
    secret.mkdir()
    mount(secret, certs.ensure(tmp_path / "first"), "..v1")
    endpoints = tmp_path / "endpoints.yaml"
    endpoints_file.write(endpoints, {"middleman": []})
    eds = EdsProcess(tmp_path, endpoints, ["middleman"])
    await eds.start_ready()
    params = dataclasses.replace(
        envoy_params(eds.port, ["middleman"]),
        public_tls_cert=str(secret / "tls.crt"),
        public_tls_key=str(secret / "tls.key"),
        sds_dir=str(tmp_path / "sds"),
    )
    write_sds(params)  # as the renderer does beside the bootstrap
    proxy = EnvoyProcess(tmp_path, params)
    try:
        await proxy.start_ready()
        yield proxy, secret
    finally:
        await proxy.stop()
        await eds.stop()


async def test_a_renewed_certificate_is_served_without_a_restart(
    envoy: tuple[EnvoyProcess, Path], tmp_path: Path
) -> None:
    proxy, secret = envoy
    host, port = proxy.listener("middleman").split(":")
    address = (host, int(port))
    first = certs.Certs(tmp_path / "first")
    served = await asyncio.to_thread(served_certificate, address, first.ca)
    assert ssl.PEM_cert_to_DER_cert(served) == ssl.PEM_cert_to_DER_cert(
        first.cert(certs.PUBLIC).read_text()
    )
    renewed = certs.ensure(tmp_path / "renewed")  # another CA: a client can tell them apart
    mount(secret, renewed, "..v2")
    expected = ssl.PEM_cert_to_DER_cert(renewed.cert(certs.PUBLIC).read_text())

    async def renewed_served() -> bool:
        try:
            pem = await asyncio.to_thread(served_certificate, address, renewed.ca)
        except ssl.SSLError:  # still the first certificate: the renewed CA rejects it
            return False
        return ssl.PEM_cert_to_DER_cert(pem) == expected

    await wait_for(renewed_served, 15.0, "Envoy serving the renewed certificate")
    assert proxy.running
