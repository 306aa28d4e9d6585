"""The preprocess service as its tests call it: a module's own server, started from the module's
``CONFIG`` and ``MACHINE`` (what it is told of the machine: DALI, GPUs), and a Triton client of it
that has seen it healthy."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import tritonclient.grpc.aio as triton

from preprocess import app


@pytest_asyncio.fixture(scope="module")
async def url(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    running = await app.start(request.module.CONFIG, request.module.MACHINE)
    yield f"127.0.0.1:{running.port}"
    await running.stop(1.0)


@pytest_asyncio.fixture
async def client(url: str) -> AsyncIterator[triton.InferenceServerClient]:
    async with triton.InferenceServerClient(url) as c:
        assert await c.is_server_ready()  # health before anything else; never a sleep
        yield c
