"""Prometheus for the tests: its binaries when installed, and its HTTP query API.

Prometheus is optional for a user of the stack, so a test that needs it skips where it is not
installed, saying how to install it (:mod:`inferline_testing.tools`; CI requires it).
"""

from __future__ import annotations

from typing import Any

import aiohttp

from inferline_testing import tools
from inferline_testing.waits import wait_for

INSTALL = "install Debian's prometheus package (apt-get install prometheus; .ci/run does)"


def tool(name: str = "promtool") -> str:
    """The path of ``prometheus`` or ``promtool``; skips the test without it (fails in CI)."""
    return tools.tool(name, INSTALL)


class QueryError(Exception):
    """Prometheus refused a query; the message is its error."""


async def query(url: str, expr: str, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """Evaluate ``expr`` now (``/api/v1/query``); the result's series (or scalar, as one)."""
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
        session.post(f"{url}/api/v1/query", data={"query": expr}) as response,
    ):
        body = await response.json()
    if body.get("status") != "success":
        raise QueryError(f"{expr!r}: {body.get('errorType')}: {body.get('error')}")
    data = body["data"]
    if data["resultType"] in ("scalar", "string"):
        return [{"metric": {}, "value": data["result"]}]
    return list(data["result"])


async def series(url: str, expr: str, timeout_s: float, what: str = "") -> list[dict[str, Any]]:
    """Wait until ``expr`` returns at least one series; return them."""

    async def found() -> list[dict[str, Any]]:
        return await query(url, expr)

    return await wait_for(found, timeout_s, what or f"a series for {expr!r}")
