"""The file source: atomic rewrites picked up, bad files rejected, readiness."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from prometheus_client import REGISTRY

from eds.cache import Endpoint, EndpointCache
from eds.sources import endpoints_file as ef
from eds.sources.file import FileSource

T0 = Endpoint("127.0.0.1", 8001, name="triton-0")
T1 = Endpoint("127.0.0.1", 8011, name="triton-1")


def errors() -> float:
    return REGISTRY.get_sample_value("inferline_eds_source_errors_total", {"source": "file"}) or 0.0


def test_a_missing_file_keeps_the_cache_not_ready(tmp_path: Path) -> None:
    cache = EndpointCache(["triton"])
    source = FileSource(cache, tmp_path / "endpoints.yaml")
    assert not source.poll()
    assert not cache.ready
    ef.write(tmp_path / "endpoints.yaml", {"triton": [T0]})
    assert source.poll()
    assert cache.ready and cache.get("triton").endpoints == (T0,)


def test_each_rewrite_is_applied_once(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    ef.write(path, {"triton": [T0]})
    cache = EndpointCache(["triton", "batcher"])
    source = FileSource(cache, path)
    source.poll()
    revision = cache.revision
    assert not source.poll()  # unchanged file: not even read
    ef.write(path, {"triton": [T0, T1]})
    assert source.poll()
    assert cache.get("triton").endpoints == (T0, T1)  # type: ignore[union-attr]
    ef.write(path, {"triton": [T0, T1]})  # rewritten, same content: no cache change
    assert not source.poll()
    assert cache.revision == revision + 1


def test_a_cluster_missing_from_the_file_is_emptied_or_removed(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    ef.write(path, {"triton": [T0], "extra": [T1]})
    cache = EndpointCache(["triton"])
    source = FileSource(cache, path)
    source.poll()
    ef.write(path, {})
    source.poll()
    assert set(cache.clusters()) == {"triton"}
    assert cache.get("triton").endpoints == ()  # type: ignore[union-attr]


def test_a_bad_file_keeps_the_last_good_endpoints(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    ef.write(path, {"triton": [T0]})
    cache = EndpointCache(["triton"])
    source = FileSource(cache, path)
    source.poll()
    before = errors()
    path.write_text("clusters: {triton: [{address: localhost, port: 1}]}")
    assert not source.poll()
    assert errors() == before + 1
    state = cache.get("triton")
    assert state is not None and state.endpoints == (T0,)
    assert not source.poll()  # the same bad file is not re-read and re-reported
    assert errors() == before + 1
    ef.write(path, {"triton": [T1]})
    assert source.poll()
    assert cache.get("triton").endpoints == (T1,)  # type: ignore[union-attr]


async def test_the_watch_sees_a_change_within_a_few_polls(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    ef.write(path, {"triton": []})
    cache = EndpointCache(["triton"])
    changed = asyncio.Event()
    cache.subscribe(lambda names: changed.set() if cache.get("triton").endpoints else None)  # type: ignore[union-attr]
    task = asyncio.create_task(FileSource(cache, path, poll_interval_s=0.05).run())
    try:
        await asyncio.sleep(0.1)
        start = time.monotonic()
        ef.set_endpoint(path, "triton", T0)
        await asyncio.wait_for(changed.wait(), 2.0)
        assert time.monotonic() - start < 0.5
    finally:
        task.cancel()
