"""Fixtures of the control-plane suites, and a fake Kubernetes API server.

The fake speaks the real list/watch wire format for EndpointSlices, so the Kubernetes
source is tested through the real ``kubernetes_asyncio`` client: a list answers with the
collection's ``resourceVersion``; a watch (``?watch=true``) is a chunked HTTP response of
one JSON event per line (ADDED, MODIFIED, DELETED, BOOKMARK), replaying history newer than
the requested version; a version older than the compacted history gets ``410 Gone`` (as an
ERROR event in a 200 stream, as the API server does, or as an HTTP 410); ``timeoutSeconds``
ends a watch normally. Pods are served for their annotations.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import re
import warnings
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

SLICES = "/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
POD = "/api/v1/namespaces/{namespace}/pods/{name}"
SELECTOR = re.compile(r"^kubernetes\.io/service-name in \((?P<names>[^)]*)\)$")


# envoy-data-plane's generated classes use a pydantic idiom that pydantic 2.12 deprecates; the
# warning (raised when they are imported, during collection) is about generated code, not ours.
GENERATED_CODE_WARNING = "Using `@model_validator` with mode='after' on a classmethod"
warnings.filterwarnings("ignore", message=re.escape(GENERATED_CODE_WARNING))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", f"ignore:{GENERATED_CODE_WARNING}")


def flag(value: str | None) -> bool:
    """A boolean query parameter as the API server parses it (Go's strconv.ParseBool)."""
    return (value or "").lower() in ("1", "t", "true")


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


@dataclass
class FakeKubeApi:
    namespace: str = "inferline"
    version: int = 1000
    slices: dict[str, dict[str, Any]] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: list[tuple[int, str, dict[str, Any]]] = field(default_factory=list)
    compacted: int = 0  # watches from versions below this get 410 Gone
    gone_as_http: bool = False
    fail_next: int = 0  # answer this many list/watch requests with 500
    requests: list[dict[str, str]] = field(default_factory=list)
    watchers: set[asyncio.Queue[dict[str, Any] | None]] = field(default_factory=set)
    url: str = ""

    # -- what tests do ------------------------------------------------------------------------

    def put_slice(self, obj: dict[str, Any]) -> int:
        obj = copy.deepcopy(obj)
        name = obj["metadata"]["name"]
        kind = "MODIFIED" if name in self.slices else "ADDED"
        return self._record(kind, obj)

    def delete_slice(self, name: str) -> int:
        return self._record("DELETED", copy.deepcopy(self.slices[name]))

    def put_pod(self, name: str, uid: str, annotations: dict[str, str] | None = None) -> None:
        self.pods[name] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "uid": uid,
                "annotations": annotations or {},
                "resourceVersion": str(self.version),
            },
        }

    def bookmark(self) -> int:
        self.version += 1
        event = {
            "type": "BOOKMARK",
            "object": {
                "kind": "EndpointSlice",
                "apiVersion": "discovery.k8s.io/v1",
                "metadata": {"resourceVersion": str(self.version)},
            },
        }
        self._broadcast(event)
        return self.version

    def compact(self) -> None:
        """Forget history; open watches get 410 Gone, as after etcd compaction."""
        # Like etcd compacted at the current revision: a watch from an older version gets
        # 410 Gone; one from the current version (what a list answers now) is still valid.
        self.compacted = self.version
        self.history.clear()
        message = f"too old resource version: (current {self.version})"
        self._broadcast({"type": "ERROR", "object": status(410, "Expired", message)})
        self.close_watches()

    def close_watches(self) -> None:
        for queue in list(self.watchers):
            queue.put_nowait(None)

    def watch_requests(self) -> list[dict[str, str]]:
        return [r for r in self.requests if flag(r.get("watch"))]

    def list_requests(self) -> list[dict[str, str]]:
        return [r for r in self.requests if not flag(r.get("watch")) and "pod" not in r]

    # -- internals ----------------------------------------------------------------------------

    def _record(self, kind: str, obj: dict[str, Any]) -> int:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        name = obj["metadata"]["name"]
        if kind == "DELETED":
            self.slices.pop(name, None)
        else:
            self.slices[name] = obj
        self.history.append((self.version, kind, obj))
        self._broadcast({"type": kind, "object": obj})
        return self.version

    def _broadcast(self, event: dict[str, Any]) -> None:
        for queue in list(self.watchers):
            queue.put_nowait(event)

    @staticmethod
    def _selected(obj: dict[str, Any], selector: str) -> bool:
        if not selector:
            return True
        match = SELECTOR.match(selector)
        assert match, f"unexpected label selector {selector!r}"
        names = {n.strip() for n in match.group("names").split(",")}
        labels = obj["metadata"].get("labels") or {}
        return labels.get("kubernetes.io/service-name") in names

    async def handle_slices(self, request: web.Request) -> web.StreamResponse:
        assert request.match_info["namespace"] == self.namespace
        query = dict(request.query)
        self.requests.append(query)
        if self.fail_next > 0:
            self.fail_next -= 1
            return web.json_response(status(500, "InternalError", "etcd is sad"), status=500)
        selector = query.get("labelSelector", "")
        if not flag(query.get("watch")):
            items = [o for o in self.slices.values() if self._selected(o, selector)]
            start = int(query.get("continue") or 0)
            limit = int(query.get("limit") or 0) or len(items) or 1
            page = items[start : start + limit]
            more = start + limit < len(items)
            return web.json_response(
                {
                    "kind": "EndpointSliceList",
                    "apiVersion": "discovery.k8s.io/v1",
                    "metadata": {
                        "resourceVersion": str(self.version),
                        **({"continue": str(start + limit)} if more else {}),
                    },
                    "items": page,
                }
            )
        since = int(query.get("resourceVersion") or 0)
        if since < self.compacted:
            gone = status(410, "Expired", f"too old resource version: {since} ({self.version})")
            if self.gone_as_http:
                return web.json_response(gone, status=410)
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            response.enable_chunked_encoding()
            await response.prepare(request)
            await response.write(json.dumps({"type": "ERROR", "object": gone}).encode() + b"\n")
            await response.write_eof()
            return response
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        for version, kind, obj in self.history:
            if version > since:
                queue.put_nowait({"type": kind, "object": obj})
        self.watchers.add(queue)
        timeout = float(query.get("timeoutSeconds") or 300)
        bookmarks = flag(query.get("allowWatchBookmarks"))
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), max(deadline - loop.time(), 0))
                except TimeoutError:
                    break
                if event is None:
                    break
                if event["type"] == "BOOKMARK" and not bookmarks:
                    continue
                if event["type"] not in ("BOOKMARK", "ERROR") and not self._selected(
                    event["object"], selector
                ):
                    continue
                await response.write(json.dumps(event).encode() + b"\n")
                if event["type"] == "ERROR":
                    break
        finally:
            self.watchers.discard(queue)
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    async def handle_pod(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.requests.append({"pod": name})
        pod = self.pods.get(name)
        if pod is None:
            return web.json_response(
                status(404, "NotFound", f'pods "{name}" not found'), status=404
            )
        return web.json_response(pod)


@pytest.fixture
async def kube_api() -> AsyncIterator[FakeKubeApi]:
    fake = FakeKubeApi()
    app = web.Application()
    app.router.add_get(SLICES, fake.handle_slices)
    app.router.add_get(POD, fake.handle_pod)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    yield fake
    fake.close_watches()
    await runner.cleanup()
