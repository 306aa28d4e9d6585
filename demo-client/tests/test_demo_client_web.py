"""The web view's aiohttp app: assets, images, the Server-Sent Events feed and the per-replica
lines from an Envoy admin (a stand-in serving /clusters), on real servers on free ports."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from demo_client.stats import Recorder
from demo_client.web import ASSETS, WebView, image_type, load_assets
from demo_client.web_state import WebState
from inferline_testing.ports import free_port
from inferline_testing.waits import wait_for

WAIT_S = 30.0
JPEG = b"\xff\xd8\xff\xe0" + b"jpeg"
PNG = b"\x89PNG\r\n\x1a\n" + b"png"


def view(envoy_admin: str | None = None, **kwargs: Any) -> WebView:
    board = WebState({"target": "t:1", "model": "classifier"}, ["a.jpg", "b.png"])
    return WebView(board, Recorder(), [JPEG, PNG], envoy_admin, push_s=0.02, **kwargs)


async def messages(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """The snapshots of an event stream, until it ends."""
    async for line in response.content:
        if line.startswith(b"data: "):
            yield json.loads(line[len(b"data: ") :])


def test_assets_ship_and_fetch_nothing_from_elsewhere() -> None:
    assets = load_assets()
    assert set(assets) == set(ASSETS)
    page = assets["index.html"].decode()
    assert re.findall(r'(?:src|href)="([^"]+)"', page) == ["/app.css", "/app.js", "/snapshot"]
    assert b"url(" not in assets["app.css"] and b"@import" not in assets["app.css"]
    script = assets["app.js"].decode()
    assert re.findall(r"https?://[^\"'\s]+", script) == ["http://www.w3.org/2000/svg"]  # a name
    assert 'new EventSource("/events")' in script


def test_image_types_by_signature() -> None:
    assert image_type(JPEG) == "image/jpeg" and image_type(PNG) == "image/png"
    assert image_type(b"RIFF\0\0\0\0WEBPVP8 ") == "image/webp"
    assert image_type(b"GIF89a") == "image/gif" and image_type(b"BM..") == "image/bmp"
    assert image_type(b"??") == "application/octet-stream"


async def test_page_assets_and_images() -> None:
    async with TestClient(TestServer(view().app())) as client:
        for path, name in (("/", "index.html"), ("/app.js", "app.js"), ("/app.css", "app.css")):
            response = await client.get(path)
            assert response.status == 200
            assert response.headers["Content-Type"] == ASSETS[name]
            assert "default-src 'none'" in response.headers["Content-Security-Policy"]
            assert await response.read() == load_assets()[name]
        response = await client.get("/images/1")
        assert response.status == 200 and response.headers["Content-Type"] == "image/png"
        assert await response.read() == PNG
        assert (await client.get("/images/2")).status == 404
        assert (await client.get("/images/x")).status == 404


async def test_the_feed_follows_the_run_and_ends_with_it() -> None:
    web_view = view()
    board, recorder = web_view.dashboard, web_view.feed.recorder
    board.waiting("waiting for t:1")
    server = TestServer(web_view.app())
    async with TestClient(server) as client:
        response = await client.get("/events")
        assert response.headers["Content-Type"] == "text/event-stream"
        seen: list[dict[str, Any]] = []

        async def read() -> None:
            async for snapshot in messages(response):
                seen.append(snapshot)

        reader = asyncio.create_task(read())
        await wait_for(_true(lambda: bool(seen)), WAIT_S, "the first snapshot")
        assert seen[0]["phase"] == "waiting" and seen[0]["message"] == "waiting for t:1"
        board.running()
        recorder.record_ok(0.010, 4)
        board.labelled(0.1, 0, "tabby", 0.9)
        await wait_for(_true(lambda: seen[-1]["images"] == 4), WAIT_S, "the images in the feed")
        latest = seen[-1]
        assert latest["phase"] == "running" and latest["history"]["total"]
        assert latest["recent"][0] == {
            "image": 0, "name": "a.jpg", "label": "tabby", "score": 0.9, "elapsed_s": 0.1,
        }  # fmt: skip
        snapshot = await (await client.get("/snapshot")).json()
        assert snapshot["images"] == 4
        board.finished("finished: the demo client has stopped")
        await server.close()  # the stream gets the last snapshot, then ends
        await asyncio.wait_for(reader, WAIT_S)
    assert seen[-1]["phase"] == "finished"


def _true(check: Any) -> Any:
    async def checked() -> bool:
        return bool(check())

    return checked


@pytest.fixture
async def envoy_admin() -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """A stand-in for Envoy's admin: /clusters?format=json answers what the dict holds."""
    clusters: dict[str, Any] = {"cluster_statuses": []}

    async def handler(request: web.Request) -> web.Response:
        assert request.query.get("format") == "json"
        return web.json_response(clusters)

    app = web.Application()
    app.router.add_get("/clusters", handler)
    async with TestServer(app) as server:
        yield str(server.make_url("")).rstrip("/"), clusters


def triton(*ports_and_totals: tuple[int, int]) -> dict[str, Any]:
    hosts = [
        {
            "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
            "stats": [{"name": "rq_total", "value": str(total)}],
            "health_status": {"eds_health_status": "HEALTHY"},
        }
        for port, total in ports_and_totals
    ]
    return {"name": "triton", "host_statuses": hosts}


async def test_replica_lines_come_from_envoys_admin(
    envoy_admin: tuple[str, dict[str, Any]],
) -> None:
    admin, clusters = envoy_admin
    web_view = view(admin, poll_s=0.02)
    web_view.dashboard.running()
    async with TestClient(TestServer(web_view.app())) as client:

        async def replicas() -> dict[str, Any]:
            snapshot = await (await client.get("/snapshot")).json()
            return dict(snapshot["replicas"])

        async def lines() -> list[dict[str, Any]]:
            return list((await replicas())["lines"])

        async def no_cluster() -> bool:
            return "has no cluster 'triton'" in (await replicas())["note"]

        await wait_for(no_cluster, WAIT_S, "the note that Envoy has no triton cluster")
        clusters["cluster_statuses"] = [triton((8001, 5))]
        first = await wait_for(lines, WAIT_S, "a line for triton-0")
        assert [line["address"] for line in first] == ["127.0.0.1:8001"]
        clusters["cluster_statuses"] = [triton((8001, 9), (8011, 3))]  # scaled to two

        async def two() -> list[dict[str, Any]]:
            found = await lines()
            return found if len(found) == 2 else []

        both = await wait_for(two, WAIT_S, "a second line")
        assert [line["address"] for line in both] == ["127.0.0.1:8001", "127.0.0.1:8011"]
        assert both[1]["requests"] == 3


async def test_without_an_admin_the_page_says_replica_lines_are_unavailable() -> None:
    port = free_port()  # nothing listens there
    web_view = view(f"http://127.0.0.1:{port}", poll_s=0.02)
    async with TestClient(TestServer(web_view.app())) as client:

        async def not_answering() -> bool:
            snapshot = await (await client.get("/snapshot")).json()
            note = str(snapshot["replicas"]["note"])
            return f"Envoy admin http://127.0.0.1:{port} is not answering" in note

        await wait_for(not_answering, WAIT_S, "the note that Envoy's admin is not answering")
    assert "--envoy-admin" in view(None).dashboard.replicas_note


async def test_serving_on_a_free_port_and_a_taken_one() -> None:
    async with view().serving("127.0.0.1", 0) as url:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url)
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            assert response.status == 200 and "inferline demo" in await response.text()
        taken = int(url.rstrip("/").rsplit(":", 1)[1])
        with pytest.raises(OSError):
            async with view().serving("127.0.0.1", taken):
                pass
