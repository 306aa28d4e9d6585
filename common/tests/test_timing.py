"""Per-hop timing (inferline.timing): the header's syntax, what a call collects, and two real
gRPC hops answering with their parts in trailing metadata."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from inferline import timing
from inferline.server import start_server


def test_server_timing_entries_with_a_duration_are_read_and_the_rest_left() -> None:
    value = 'queue;dur=0.5, batch;desc="the batch";dur=12, cache, bad;dur=x, ;dur=3'
    assert timing.parse(value) == [("queue", 0.5), ("batch", 12.0)]
    assert timing.parse(timing.header([("decode", 2.345), ("infer", 10.0)])) == [
        ("decode", 2.35),
        ("infer", 10.0),
    ]


def test_only_a_collecting_call_records() -> None:
    timing.record("decode", 0.002)  # nobody collects: nothing happens, nothing fails
    timing.absorb([(timing.KEY, "infer;dur=1")])
    assert not timing.active()
    with timing.collecting() as entries:
        assert timing.active()
        timing.record("decode", 0.002)
        timing.absorb([("other", "x"), (timing.KEY, "infer;dur=1, queue;dur=2")])
        timing.extend([("batch", 3.0)])
        with timing.collecting() as inner:  # a call of its own: its entries are its own
            timing.record("inner", 1.0)
    assert entries == [("decode", 2.0), ("infer", 1.0), ("queue", 2.0), ("batch", 3.0)]
    assert inner == [("inner", 1000.0)]


def test_timing_is_off_when_the_environment_says_so() -> None:
    assert timing.enabled({}) and timing.enabled({timing.ENV: "true"})
    assert not timing.enabled({timing.ENV: "false"}) and not timing.enabled({timing.ENV: "0"})


@pytest.mark.parametrize("own", ["front", ""])
async def test_each_hop_answers_with_its_own_and_whats_beneath(own: str) -> None:
    async def leaf(request: bytes, context: Any) -> bytes:
        timing.record("decode", 0.004)
        return b"leaf"

    def register(handler: Any) -> Any:
        def add(server: grpc.aio.Server) -> None:
            handlers = {"Call": grpc.unary_unary_rpc_method_handler(handler)}
            server.add_generic_rpc_handlers(
                (grpc.method_handlers_generic_handler("test.Hop", handlers),)
            )

        return add

    below = await start_server("leaf", 0, [register(leaf)], ["test.Hop"], host="127.0.0.1",
                               timing_as="")  # fmt: skip
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{below.port}")

    async def front(request: bytes, context: Any) -> bytes:
        call = channel.unary_unary("/test.Hop/Call")(request, timeout=5)
        answer: bytes = await call
        timing.absorb(await call.trailing_metadata())
        return answer

    server = await start_server("front", 0, [register(front)], ["test.Hop"], host="127.0.0.1",
                                timing_as=own)  # fmt: skip
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as client:
            call = client.unary_unary("/test.Hop/Call")(b"x", timeout=5)
            await call
            trailers = await call.trailing_metadata()
    finally:
        await channel.close()
        await server.stop(0)
        await below.stop(0)
    [value] = [v for k, v in trailers if k == timing.KEY]
    entries = timing.parse(str(value))
    names = [name for name, _ in entries]
    assert names == ([own] if own else []) + ["decode"]
    assert dict(entries)["decode"] == 4.0
