"""Discovery from Kubernetes: the EndpointSlices of the pipeline's Services.

The informer pattern with ``kubernetes_asyncio``: list (the cache becomes ready with the
first complete list), then watch from the list's ``resourceVersion`` with bookmarks, so a
reconnect resumes where it stopped; a ``410 Gone`` (the version was compacted away) means
list again; any other failure is retried with capped exponential backoff, keeping the
last good endpoints meanwhile. Each pod's ``inferline.io/weight`` annotation is read once
(by pod UID) and becomes its endpoints' weight.

RBAC: ``list`` and ``watch`` on ``endpointslices.discovery.k8s.io`` and ``get`` on ``pods`` in
the namespace.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Iterable, Sequence
from typing import Any

import aiohttp
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from eds import metrics
from eds.cache import EndpointCache
from eds.sources import endpointslice as es

logger = logging.getLogger(__name__)

# What a failed list, watch or pod read can raise, short of a bug.
TRANSIENT = (ApiException, aiohttp.ClientError, TimeoutError, OSError, ValueError)


class Backoff:
    """Capped exponential backoff with full jitter."""

    def __init__(self, initial_s: float = 0.5, maximum_s: float = 30.0) -> None:
        self.initial_s, self.maximum_s = initial_s, maximum_s
        self._attempt = 0

    def next(self) -> float:
        ceiling = min(self.maximum_s, self.initial_s * 2**self._attempt)
        self._attempt += 1
        return random.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self._attempt = 0


class KubernetesSource:
    name = "kubernetes"

    def __init__(
        self,
        cache: EndpointCache,
        api: client.ApiClient,
        namespace: str,
        services: Sequence[str],
        port_name: str = "grpc",
        watch_timeout_s: int = 300,
        backoff: Backoff | None = None,
    ) -> None:
        if not services:
            raise ValueError("the Kubernetes source needs at least one Service name")
        self.cache = cache
        self.namespace = namespace
        self.services = tuple(services)
        self.port_name = port_name
        self.watch_timeout_s = watch_timeout_s
        self.backoff = backoff or Backoff()
        self.selector = f"{es.SERVICE_LABEL} in ({','.join(self.services)})"
        self.resource_version: str | None = None
        self._discovery = client.DiscoveryV1Api(api)
        self._core = client.CoreV1Api(api)
        self._slices: dict[str, dict[str, Any]] = {}
        self._weights: dict[str, int] = {}  # pod uid -> weight
        self.lists = 0  # complete lists done (tests and logs)

    async def run(self) -> None:
        """List, watch, relist on 410, back off on errors; until cancelled."""
        services = ", ".join(self.services)
        logger.info("watching EndpointSlices in namespace %s for %s", self.namespace, services)
        while True:
            try:
                if self.resource_version is None:
                    await self.list()
                await self.watch()
            except ApiException as exc:
                if exc.status == 410:
                    gone = self.resource_version
                    logger.info("resourceVersion %s is gone (410); listing again", gone)
                    self.resource_version = None
                    continue
                await self._retry(f"API error {exc.status} {exc.reason}")
            except TRANSIENT as exc:
                await self._retry(f"{type(exc).__name__}: {exc}")

    async def list(self) -> None:
        """Replace every slice with a fresh list; the cache becomes ready."""
        slices: dict[str, dict[str, Any]] = {}
        token = ""
        while True:
            call = self._discovery.list_namespaced_endpoint_slice
            if token:
                request = call(
                    self.namespace, label_selector=self.selector, limit=500, _continue=token,
                    _preload_content=False,
                )  # fmt: skip
            else:
                request = call(
                    self.namespace, label_selector=self.selector, limit=500, _preload_content=False
                )
            page = await self._get_json(request)
            for item in page.get("items") or []:
                slices[es.slice_name(item)] = item
            meta = page.get("metadata") or {}
            token = str(meta.get("continue") or "")
            if not token:
                version = meta.get("resourceVersion")
                break
        self._slices = slices
        self.lists += 1
        await self._publish(self.services)
        self.resource_version = str(version) if version else None
        self.backoff.reset()
        self.cache.mark_ready()
        logger.info(
            "listed %d EndpointSlices at resourceVersion %s: %s",
            len(slices),
            self.resource_version,
            self.cache.describe(),
        )

    async def watch(self) -> None:
        """Apply watch events until the server ends the watch (its timeout)."""
        watcher = watch.Watch()
        async with watcher:
            stream = watcher.stream(
                self._discovery.list_namespaced_endpoint_slice,
                self.namespace,
                label_selector=self.selector,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout_s,
                _request_timeout=self.watch_timeout_s + 30,
            )
            async for event in stream:
                if not isinstance(event, dict):
                    raise ValueError(f"unexpected line in the watch stream: {str(event)[:200]!r}")
                self._apply(event["type"], event["raw_object"])
                if event["type"] != "BOOKMARK":
                    service = es.service_of(event["raw_object"])
                    if service in self.services:
                        await self._publish([service])
                self.backoff.reset()

    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        version = es.resource_version(obj)
        if kind != "BOOKMARK":
            name = es.slice_name(obj)
            if kind == "DELETED":
                self._slices.pop(name, None)
            else:
                self._slices[name] = obj
            logger.debug("EndpointSlice %s %s", name, kind)
        if version:
            self.resource_version = version

    async def _publish(self, services: Iterable[str]) -> None:
        wanted = set(services)
        by_service: dict[str, list[dict[str, Any]]] = {s: [] for s in wanted}
        for slice_ in self._slices.values():
            service = es.service_of(slice_)
            if service in wanted:
                by_service[service].append(slice_)
        for uid, pod in es.pods_of(s for group in by_service.values() for s in group):
            if uid not in self._weights:
                self._weights[uid] = await self._pod_weight(pod, uid)
        update = {s: es.endpoints(by_service[s], self.port_name, self._weights) for s in wanted}
        if self.cache.update(update):
            metrics.SOURCE_UPDATES.labels(self.name).inc()
            logger.info("EndpointSlices changed: %s", self.cache.describe())
        live = {uid for uid, _ in es.pods_of(self._slices.values())}
        self._weights = {uid: w for uid, w in self._weights.items() if uid in live}

    async def _pod_weight(self, pod: str, uid: str) -> int:
        where = f"pod {self.namespace}/{pod}"
        try:
            data = await self._get_json(
                self._core.read_namespaced_pod(pod, self.namespace, _preload_content=False)
            )
        except ApiException as exc:
            if exc.status != 404:
                metrics.SOURCE_ERRORS.labels(self.name).inc()
                logger.warning(
                    "%s: cannot read its weight (%s %s); using 1", where, exc.status, exc.reason
                )
            return 1
        meta = data.get("metadata") or {}
        if meta.get("uid") not in (None, uid):
            return 1  # a new pod with the old name: its own endpoints will follow
        return es.parse_weight((meta.get("annotations") or {}).get(es.WEIGHT_ANNOTATION), where)

    @staticmethod
    async def _get_json(call: Any) -> dict[str, Any]:
        response = await call
        try:
            body = await response.read()
        finally:
            response.release()
        if not 200 <= response.status <= 299:
            detail = body[:300].decode(errors="replace")
            raise ApiException(status=response.status, reason=f"{response.reason}: {detail}")
        data = json.loads(body)
        if not isinstance(data, dict):
            raise ValueError("the API server answered with something other than a JSON object")
        return data

    async def _retry(self, why: str) -> None:
        metrics.SOURCE_ERRORS.labels(self.name).inc()
        delay = self.backoff.next()
        logger.warning("Kubernetes API: %s; retrying in %.1f s", why, delay)
        await asyncio.sleep(delay)
