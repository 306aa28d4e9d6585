"""The live web view: an aiohttp app on the load's event loop.

    GET /             the page (package data, as are its script and stylesheet: no CDN, no
    GET /app.js       download; the Content-Security-Policy lets the page load nothing else)
    GET /app.css
    GET /events       Server-Sent Events: a JSON snapshot of the dashboard every PUSH_S seconds
    GET /snapshot     the latest snapshot, as JSON
    GET /images/{n}   image n of the run, as the load sends it (the recent-images strip)

The snapshots are made once per push, whatever the number of pages open, by a :class:`Feed`;
a second task polls Envoy's admin for the per-replica lines (:mod:`demo_client.envoy_hosts`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from importlib import resources

from aiohttp import web

from demo_client import envoy_hosts
from demo_client.stats import Recorder
from demo_client.web_state import WebState

logger = logging.getLogger(__name__)

PUSH_S = 0.25
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
}
CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'"
SHUTDOWN_TIMEOUT_S = 5.0


def load_assets() -> dict[str, bytes]:
    """The page's files, from the package (a missing one fails here, at start-up)."""
    folder = resources.files("demo_client") / "static"
    return {name: (folder / name).read_bytes() for name in ASSETS}


def image_type(data: bytes) -> str:
    """The media type of an encoded image, by its signature."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"BM"):
        return "image/bmp"
    if data.startswith((b"II*\x00", b"MM\x00*")):
        return "image/tiff"
    return "application/octet-stream"


class Feed:
    """The dashboard's snapshots, published to any number of listeners; closed with a final
    one, after which the listeners end."""

    def __init__(
        self, dashboard: WebState, recorder: Recorder, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.dashboard = dashboard
        self.recorder = recorder
        self.clock = clock
        self.version = 0
        self.data = b"{}"
        self.closed = False
        self._changed = asyncio.Event()

    def publish(self) -> None:
        """A snapshot of now."""
        if self.closed:
            return
        self.dashboard.tick(self.clock(), self.recorder)
        snapshot = self.dashboard.snapshot(self.recorder)
        self.data = json.dumps(snapshot, separators=(",", ":")).encode()
        self.version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    def close(self) -> None:
        """Publish the last snapshot; listeners end after it."""
        self.publish()
        self.closed = True
        self._changed.set()

    async def next(self, seen: int) -> tuple[int, bytes, bool]:
        """The first snapshot after version ``seen``: (version, JSON, whether it is the last)."""
        while self.version == seen and not self.closed:
            await self._changed.wait()
        return self.version, self.data, self.closed

    async def run(self, every_s: float = PUSH_S) -> None:
        """Publish every ``every_s`` seconds until closed (or cancelled)."""
        while not self.closed:
            self.publish()
            await asyncio.sleep(every_s)


class WebView:
    """The page, its feed and the images of one run; ``envoy_admin`` (a URL, or ``None``)
    is where the per-replica lines of ``cluster`` come from."""

    def __init__(
        self,
        dashboard: WebState,
        recorder: Recorder,
        images: Sequence[bytes],
        envoy_admin: str | None,
        cluster: str = envoy_hosts.DEFAULT_CLUSTER,
        push_s: float = PUSH_S,
        poll_s: float = envoy_hosts.POLL_S,
    ) -> None:
        self.dashboard = dashboard
        self.images = list(images)
        self.envoy_admin = envoy_admin
        self.cluster = cluster
        self.push_s = push_s
        self.poll_s = poll_s
        self.feed = Feed(dashboard, recorder)
        self.assets = load_assets()
        if envoy_admin is None:
            dashboard.envoy_unavailable("no Envoy admin given (--envoy-admin)")

    def app(self) -> web.Application:
        """The aiohttp application; its background tasks run while it is started."""
        app = web.Application()
        app.router.add_get("/", self._asset("index.html"))
        app.router.add_get("/app.js", self._asset("app.js"))
        app.router.add_get("/app.css", self._asset("app.css"))
        app.router.add_get("/events", self._events)
        app.router.add_get("/snapshot", self._snapshot)
        app.router.add_get(r"/images/{index:\d+}", self._image)
        app.router.add_get("/favicon.ico", self._no_icon)
        app.cleanup_ctx.append(self._background)
        app.on_shutdown.append(self._shutdown)
        return app

    @contextlib.asynccontextmanager
    async def serving(self, host: str, port: int) -> AsyncIterator[str]:
        """Serve on ``host:port`` (0: any free port); yields the page's URL. ``OSError`` when
        it cannot listen there."""
        runner = web.AppRunner(self.app(), shutdown_timeout=SHUTDOWN_TIMEOUT_S, access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            bound_host, bound_port = runner.addresses[0][:2]
            shown = f"[{bound_host}]" if ":" in str(bound_host) else bound_host
            yield f"http://{shown}:{bound_port}/"
        finally:
            await runner.cleanup()

    async def _background(self, app: web.Application) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(self.feed.run(self.push_s), name="web-feed")]
        if self.envoy_admin is not None:
            poll = envoy_hosts.poll(self.dashboard, self.envoy_admin, self.cluster, self.poll_s)
            tasks.append(asyncio.create_task(poll, name="web-envoy-poll"))
        yield
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _shutdown(self, app: web.Application) -> None:
        self.feed.close()  # the open pages get the last snapshot, and their streams end

    def _asset(self, name: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
        body, content_type = self.assets[name], ASSETS[name]

        async def handler(request: web.Request) -> web.StreamResponse:
            return web.Response(
                body=body,
                headers={
                    "Content-Type": content_type,
                    "Cache-Control": "no-cache",
                    "Content-Security-Policy": CSP,
                },
            )

        return handler

    async def _events(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        seen = 0
        with contextlib.suppress(ConnectionResetError):  # the page went away
            await response.write(b"retry: 1000\n\n")
            while True:
                seen, data, last = await self.feed.next(seen)
                await response.write(b"data: " + data + b"\n\n")
                if last:
                    break
        return response

    async def _snapshot(self, request: web.Request) -> web.Response:
        if self.feed.version == 0:
            self.feed.publish()
        return web.Response(
            body=self.feed.data,
            headers={"Content-Type": "application/json", "Cache-Control": "no-cache"},
        )

    async def _no_icon(self, request: web.Request) -> web.Response:
        return web.Response(status=204)  # browsers ask; there is none

    async def _image(self, request: web.Request) -> web.Response:
        index = int(request.match_info["index"])
        if index >= len(self.images):
            raise web.HTTPNotFound(text=f"no image {index}: the run has {len(self.images)}")
        data = self.images[index]
        return web.Response(
            body=data,
            headers={"Content-Type": image_type(data), "Cache-Control": "max-age=3600"},
        )
