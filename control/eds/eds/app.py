"""Wires configuration to the cache, a discovery source and the xDS server; used by __main__
and by tests.

Health (``grpc.health.v1``) says SERVING only once the source has been read completely, so
a readiness probe (or a test) never sees a control plane that would answer with nothing.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from eds import metrics
from eds.cache import EndpointCache
from eds.config import PREFIX, Config
from eds.metrics import CacheMetrics
from eds.resources import SnapshotBuilder
from eds.server import SERVICE_NAMES, XdsServer
from eds.sources.file import FileSource
from inferline.config import ConfigError, env_name
from inferline.server import RunningServer, start_server
from inferline.tls import health_port, server_tls

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

logger = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class Source(Protocol):
    name: str

    async def run(self) -> None: ...


@dataclass
class Eds:
    cache: EndpointCache
    xds: XdsServer
    server: RunningServer
    source_task: asyncio.Task[None]
    closers: list[Callable[[], Awaitable[object]]]

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace: float) -> None:
        """NOT_SERVING, stop watching, end the streams, then stop within ``grace`` seconds."""
        await self.server.set_serving(False)
        self.source_task.cancel()
        await asyncio.gather(self.source_task, return_exceptions=True)
        self.xds.close()
        await self.server.stop(grace)
        for close in self.closers:
            await close()


async def kubernetes_api(kubeconfig: str) -> ApiClient:
    """An ApiClient: from ``kubeconfig`` if given, else in-cluster, else ~/.kube/config."""
    from kubernetes_asyncio import client
    from kubernetes_asyncio import config as kube_config

    configuration = client.Configuration()
    try:
        if kubeconfig:
            await kube_config.load_kube_config(
                config_file=kubeconfig, client_configuration=configuration
            )
        else:
            try:
                kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except kube_config.ConfigException:
                await kube_config.load_kube_config(client_configuration=configuration)
    except (kube_config.ConfigException, OSError) as exc:
        where = kubeconfig or "in-cluster or ~/.kube/config"
        raise ConfigError(
            f"{env_name(PREFIX, 'kubeconfig')}: no usable Kubernetes configuration ({where}): {exc}"
        ) from exc
    return client.ApiClient(configuration)


def default_namespace() -> str:
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


async def make_source(
    config: Config, cache: EndpointCache, closers: list[Callable[[], Awaitable[object]]]
) -> Source:
    if config.source == "file":
        return FileSource(cache, Path(config.endpoints_file), config.poll_interval_s)
    from eds.sources.kubernetes import KubernetesSource

    api = await kubernetes_api(config.kubeconfig)
    closers.append(api.close)
    return KubernetesSource(
        cache,
        api,
        config.namespace or default_namespace(),
        config.service_names,
        config.port_name,
        config.watch_timeout_s,
    )


async def start(config: Config) -> Eds:
    cache = EndpointCache(config.service_names)
    cache.subscribe(CacheMetrics(cache).update)
    metrics.declare(config.source)
    closers: list[Callable[[], Awaitable[object]]] = []
    source = await make_source(config, cache, closers)  # a bad configuration fails here
    xds = XdsServer(SnapshotBuilder(cache))
    server = await start_server(
        "eds",
        config.port,
        [xds.register],
        SERVICE_NAMES,
        host=config.host,
        tls=server_tls(config),
        health_port=health_port(config),
    )
    await server.set_serving(False)
    tasks: set[asyncio.Task[None]] = set()

    def on_change(_: frozenset[str]) -> None:
        if cache.ready and not tasks:
            task = asyncio.get_running_loop().create_task(server.set_serving(True))
            tasks.add(task)

    cache.subscribe(on_change)
    task = asyncio.create_task(source.run(), name=f"eds-source-{source.name}")
    task.add_done_callback(_report_exit)
    logger.info(
        "xDS on %s:%d from source %s (pid %d); clusters: %s",
        config.host,
        server.port,
        source.name,
        os.getpid(),
        ", ".join(config.service_names),
    )
    return Eds(cache, xds, server, task, closers)


def _report_exit(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        logger.error("the discovery source stopped", exc_info=task.exception())
