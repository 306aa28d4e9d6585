"""Announce and drain without an Envoy: the endpoints file changes, the stop still happens."""

from __future__ import annotations

from pathlib import Path

from eds.cache import Endpoint
from eds.sources import endpoints_file
from inferline_stack import scaling


def test_announce_and_drain_without_envoy(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    endpoint = Endpoint("127.0.0.1", 8001, name="triton-0")
    assert scaling.announce_sync(path, "triton", endpoint) is None
    assert endpoints_file.load(path) == {"triton": (endpoint,)}
    stopped: list[bool] = []
    drained = scaling.drain_sync(
        path, "triton", "127.0.0.1", 8001, "http://127.0.0.1:9", lambda: stopped.append(True), 0.2
    )
    assert not drained  # nobody confirmed it...
    assert stopped == [True]  # ...but it was stopped and removed all the same
    assert endpoints_file.load(path) == {"triton": ()}
