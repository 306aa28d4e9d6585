"""The demo client's web view in a real browser, against the session's stack.

``python -m demo_client load --web`` runs its load on the stack's public endpoint and takes the
per-replica lines from the stack's Envoy admin; Debian's chromium, driven by playwright, loads
the page from it (the system browser: no browser is ever downloaded). The chart shows
images/s; Triton is scaled to two replicas as ``make scale`` does, and a second replica's line
appears with images/s of its own; a screenshot of the page is written to
``build/artifacts/web-view.png``. Triton goes back to one replica whatever happens.

Skipped where chromium or playwright is missing, failed instead in CI
(``INFERLINE_REQUIRE_TOOLS=1``).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from inferline.labels import load_labels
from inferline_stack.config import TRITON, StackConfig
from inferline_stack.services import triton_replica
from inferline_testing import media, stack_cli
from inferline_testing.browser import launch_args, screenshot_path
from inferline_testing.ports import free_port
from inferline_testing.waits import wait_for

pytestmark = pytest.mark.e2e

WAIT_S = 120.0  # generous: only bounds how long a broken run takes to fail
SCALE_WAIT_S = 300.0  # a second Triton with the real model, on a busy machine
CONCURRENCY = 8


def triton_address(config: StackConfig, index: int) -> str:
    """Replica ``index``'s label on the page: its address as Envoy has it (in-pod: the pod's)."""
    return triton_replica(config, index).address


async def answering(url: str) -> bool:
    """Whether the page at ``url`` answers yet."""
    try:
        async with aiohttp.ClientSession() as session, session.get(url) as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


@pytest.fixture
async def web_view(stack: StackConfig, tmp_path: Path) -> AsyncIterator[str]:
    """The demo client with ``--web`` on a free port: its load on the stack's public endpoint
    (the sample images, built in ``tmp_path``), its replica lines from the stack's Envoy admin.
    Yields the page's URL once it answers; stopped with Ctrl-C (SIGINT) after the test."""
    port = free_port()
    log = tmp_path / "demo-client.log"
    with log.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "demo_client", "load", "--web", "--web-port", str(port)),
            *("--target", f"127.0.0.1:{stack.public_port}", "--envoy-admin", stack.admin_url),
            *("--concurrency", str(CONCURRENCY), "--duration", "3600", "--json"),
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
        )
    url = f"http://127.0.0.1:{port}/"

    def exited() -> str | None:
        if proc.returncode is None:
            return None
        return f"the demo client exited {proc.returncode}:\n{log.read_text(errors='replace')}"

    try:
        await wait_for(lambda: answering(url), WAIT_S, f"the web view at {url}", abort=exited)
        yield url
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        out, _ = await asyncio.wait_for(proc.communicate(), WAIT_S)
        print(f"demo client: {out.decode(errors='replace').strip()}")
    assert proc.returncode == 0, log.read_text(errors="replace")
    assert f"web view: {url}" in log.read_text(errors="replace")


async def last_value(page: Any, selector: str) -> float:
    """The last value of a chart line (its ``data-last``; 0 where it has none)."""
    value = await page.get_attribute(selector, "data-last")
    return float(value or 0)


@pytest.mark.timeout(900)  # the session's stack may start first, then a second Triton
async def test_the_web_view_shows_a_second_replica_after_a_scale_up(
    stack: StackConfig, web_view: str
) -> None:
    launch = launch_args()
    from playwright.async_api import async_playwright

    first, second = triton_address(stack, 0), triton_address(stack, 1)
    page_errors: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(**launch)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 1000})

            def console(message: Any) -> None:
                if message.type == "error":
                    page_errors.append(message.text)

            page.on("pageerror", lambda error: page_errors.append(str(error)))
            page.on("console", console)
            await page.goto(web_view)
            total = '#chart path[data-series="total"]'
            await page.wait_for_function(
                "(selector) => Number(document.querySelector(selector)?.dataset.last) > 0",
                arg=total,
                timeout=WAIT_S * 1000,
            )  # the chart shows the load's images/s
            assert await last_value(page, total) > 0
            rate_now = await page.text_content("#rate-now")
            assert rate_now is not None and float(rate_now.replace(",", "")) > 0
            replica_lines = '#chart path[data-series="replica"]'
            await page.wait_for_selector(f'{replica_lines}[data-replica="{first}"]')
            assert await page.locator(replica_lines).count() == 1
            note = await page.text_content("#replica-note") or ""
            assert "unavailable" not in note and "share of Triton requests" in note, note
            # The probes' bars: each hop of the real pipeline timed its part of the answer.
            newest = page.locator("#timing-bars .bar-row").first
            await newest.locator('.segment[data-segment="infer"]').wait_for(timeout=WAIT_S * 1000)
            drawn = await newest.locator(".segment").evaluate_all(
                "(segments) => segments.map((s) => s.dataset.segment)"
            )
            assert {"envoy", "middleman", "queue", "decode", "infer"} <= set(drawn), drawn
            try:
                await stack_cli.scale(stack, TRITON, 2)
                line = f'{replica_lines}[data-replica="{second}"]'
                await page.wait_for_function(
                    "(selector) => Number(document.querySelector(selector)?.dataset.last) > 0",
                    arg=line,
                    timeout=SCALE_WAIT_S * 1000,
                )  # triton-1 has a line on the chart, and images/s of its own
                await page.wait_for_function(
                    "(selector) => Number(document.querySelector(selector).dataset.points) >= 10",
                    arg=line,
                    timeout=WAIT_S * 1000,
                )  # five seconds of it (a point every 0.5 s), for the screenshot
                assert await page.locator(replica_lines).count() == 2
                assert await page.locator(f'#replicas tr[data-replica="{second}"]').count() == 1
                await page.wait_for_selector("#recent img")  # labelled images in the strip
                assert await last_value(page, total) > 0
                shot = screenshot_path("web-view.png")
                await page.screenshot(path=str(shot), full_page=True)
                print(f"web view screenshot: {shot}")
            finally:
                await stack_cli.scale(stack, TRITON, 1)
        finally:
            await browser.close()
    assert page_errors == []


@pytest.mark.timeout(600)
async def test_the_web_view_follows_a_video_streamed_in_chunks(
    stack: StackConfig, tmp_path: Path
) -> None:
    """``video FILE --web``: the page shows frames/s and each sampled frame's label as the
    video streams in chunks (a minute of the panning cat, 4 frames a second sampled)."""
    launch = launch_args()
    from playwright.async_api import async_playwright

    video = tmp_path / "cat.webm"
    video.write_bytes(media.make_video("vp9_webm", media.video_frames(30) * 20, fps=10.0))
    cats = {load_labels("")[i] for i in media.CAT_CLASSES}
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    page_errors: list[str] = []
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(**launch)
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "demo_client", "video", str(video), "--fps", "4"),
            *("--chunk-bytes", "16384", "--web", "--web-port", str(port), "--json"),
            *("--target", f"127.0.0.1:{stack.public_port}", "--envoy-admin", stack.admin_url),
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 1000})
            page.on("pageerror", lambda error: page_errors.append(str(error)))
            await wait_for(lambda: answering(url), WAIT_S, f"the web view at {url}")
            await page.goto(url)
            await page.wait_for_function(
                "() => document.querySelectorAll('#frames tbody tr').length >= 8",
                timeout=WAIT_S * 1000,
            )  # frames arrive on the page while the video streams (or with its last snapshot)
            labels = await page.locator("#frames tbody tr td:nth-child(3)").all_text_contents()
            assert cats & set(labels), labels
            progress = await page.text_content("#video-progress") or ""
            assert progress.startswith("cat.webm: "), progress
            units = await page.locator(".unit").all_text_contents()
            assert set(units) == {"frames"}, units
            assert float((await page.text_content("#images") or "0").replace(",", "")) >= 8
            shot = screenshot_path("web-video.png")
            await page.screenshot(path=str(shot), full_page=True)
            print(f"web view (video) screenshot: {shot}")
        finally:
            await browser.close()
            if proc.returncode is None:
                proc.send_signal(signal.SIGINT)
            out, _ = await asyncio.wait_for(proc.communicate(), WAIT_S)
    text = out.decode(errors="replace")
    assert proc.returncode in (0, 130), text
    assert page_errors == []
