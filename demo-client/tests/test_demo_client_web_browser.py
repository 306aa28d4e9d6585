"""The web view's page in a real browser (Debian's chromium, driven by playwright), served by a
:class:`~demo_client.web.WebView` whose dashboard the test feeds itself: no server, no load.

Skipped where chromium or playwright is missing, failed instead in CI
(``INFERLINE_REQUIRE_TOOLS=1``).
"""

from __future__ import annotations

from typing import Any

from demo_client.stats import Recorder
from demo_client.web import WebView
from demo_client.web_state import WebState
from inferline_testing.browser import launch_args

WAIT_MS = 30_000
TRACE_VIEW = "http://127.0.0.1:5000/#/experiments/0/traces?selectedEvaluationId=tr-{trace_id}"
TIMING = {"envoy": 9.0, "middleman": 8.5, "queue": 1.5, "batch": 6.0, "decode": 1.0, "infer": 4.0}
SLOW = "5" * 32  # the slowest timed request's trace id


def timed_view() -> WebView:
    """A running load's page with three timed requests answered (the second the slowest) and one
    failed."""
    board = WebState(
        {"target": "t:1", "model": "classifier", "concurrency": 8, "batch": 1, "window_s": 2.0},
        ["a.jpg"],
        timer_every_s=0.5,
        trace_view=TRACE_VIEW,
    )
    board.running()
    board.timed(100.0, 0.5, "1" * 32, 12.0, TIMING)
    board.timed(100.5, 1.0, SLOW, 36.0, {**TIMING, "envoy": 33.0, "infer": 28.0, "batch": 30.0})
    board.timed(101.0, 1.5, "3" * 32, 12.0, TIMING)
    board.timing_failed(101.5, 2.0, "UNAVAILABLE: no healthy upstream")
    return WebView(board, Recorder(), [b"\xff\xd8\xff"], None, push_s=0.05)


async def test_the_timing_panel_draws_stacked_bars_and_links_the_slowest_to_their_traces() -> None:
    launch = launch_args()
    from playwright.async_api import async_playwright

    page_errors: list[str] = []
    async with timed_view().serving("127.0.0.1", 0) as url, async_playwright() as playwright:
        browser = await playwright.chromium.launch(**launch)
        try:
            page = await browser.new_page(viewport={"width": 1200, "height": 1000})

            def console(message: Any) -> None:
                if message.type == "error":  # a Content-Security-Policy violation among them
                    page_errors.append(message.text)

            page.on("pageerror", lambda error: page_errors.append(str(error)))
            page.on("console", console)
            await page.goto(url)
            rows = page.locator("#timing-bars .bar-row")
            await rows.first.wait_for(timeout=WAIT_MS)
            assert await page.locator("#timing-section").is_visible()
            assert await rows.count() == 3
            newest = rows.first  # newest first: 12 ms, of which 3 outside the pipeline
            assert await newest.get_attribute("data-trace-id") == "3" * 32
            segments = newest.locator(".segment")
            assert await segments.evaluate_all("(s) => s.map((e) => e.dataset.segment)") == [
                "envoy", "middleman", "queue", "pod & network", "decode", "infer",
                "client & network",
            ]  # fmt: skip
            infer = newest.locator('.segment[data-segment="infer"]')
            assert await infer.get_attribute("title") == "infer: 4.0 ms of 12.0 ms"
            # widths set from the script apply under the page's CSP: infer is a third of its bar
            bar, part = await newest.locator(".bar").bounding_box(), await infer.bounding_box()
            assert bar is not None and part is not None
            assert abs(part["width"] / bar["width"] - 4 / 12) < 0.02
            # the bars share a scale: the 36 ms one is three times as long as a 12 ms one
            slow = await rows.nth(1).locator(".bar").bounding_box()
            assert slow is not None and abs(slow["width"] / bar["width"] - 3) < 0.05
            assert await newest.locator(".total").text_content() == "12.0 ms"
            assert await page.locator("#timing-legend li").count() == 7
            slowest = page.locator("#slowest li.bar-row")
            assert await slowest.count() == 3
            link = slowest.first.locator("a")
            assert await link.get_attribute("href") == TRACE_VIEW.replace("{trace_id}", SLOW)
            assert await link.get_attribute("target") == "_blank"
            assert await link.get_attribute("rel") == "noopener"
            note = await page.text_content("#timing-note") or ""
            assert "1 timed request failed" in note and "UNAVAILABLE" in note
        finally:
            await browser.close()
    assert page_errors == []
