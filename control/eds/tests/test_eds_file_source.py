"""The file source: atomic rewrites picked up, bad files rejected, readiness."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import REGISTRY

from eds.cache import Endpoint, EndpointCache
from eds.sources import endpoints_file as ef
from eds.sources.file import FileSource
from inferline_testing.waits import wait_for_state

WAIT_S = 30.0  # generous: only bounds how long a broken run takes to fail

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


async def test_the_running_watch_applies_a_rewrite(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    ef.write(path, {"triton": []})
    cache = EndpointCache(["triton"])
    seen: list[tuple[str, tuple[Endpoint, ...]]] = []

    def record(names: frozenset[str]) -> None:
        state = cache.get("triton")
        seen.append(("ready" if cache.ready else "not ready", state.endpoints if state else ()))

    cache.subscribe(record)
    task = asyncio.create_task(FileSource(cache, path, poll_interval_s=0.05).run())
    try:
        await wait_for_state(lambda: cache.ready, WAIT_S, "the first read")  # it is watching
        assert cache.get("triton").endpoints == ()  # type: ignore[union-attr]
        ef.set_endpoint(path, "triton", T0)
        await wait_for_state(lambda: len(seen) == 2, WAIT_S, f"the rewrite applied ({seen})")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    # Two notifications: becoming ready with the empty cluster, then the one change.
    assert seen == [("ready", ()), ("ready", (T0,))]
