"""Announce and drain without an Envoy: the endpoints file changes, the stop still happens."""

from __future__ import annotations

import asyncio
from pathlib import Path

from eds.cache import Endpoint
from eds.sources import endpoints_file
from inferline_stack import scaling


def test_announce_and_drain_without_envoy(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    grpc = Endpoint("127.0.0.1", 8090, name="middleman-0")
    rest = Endpoint("127.0.0.1", 8093, name="middleman-0")
    members = [("middleman", grpc), ("middleman-rest", rest)]
    assert asyncio.run(scaling.announce(path, members)) is None
    assert endpoints_file.load(path) == {"middleman": (grpc,), "middleman-rest": (rest,)}
    stopped: list[bool] = []
    drained = asyncio.run(
        scaling.drain(path, members, "http://127.0.0.1:9", lambda: stopped.append(True), 0.2)
    )
    assert not drained  # nobody confirmed it...
    assert stopped == [True]  # ...but it was stopped and removed all the same
    assert endpoints_file.load(path) == {"middleman": (), "middleman-rest": ()}
