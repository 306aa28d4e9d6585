"""The endpoint cache: versions by content, declared clusters, readiness, notifications."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eds.cache import Endpoint, EndpointCache, Health, cluster_state, content_version, normalise

A = Endpoint("10.0.0.1", 8001)
B = Endpoint("10.0.0.2", 8001, Health.DRAINING, weight=2, zone="a", name="triton-1")

endpoints = st.builds(
    Endpoint,
    address=st.sampled_from(["10.0.0.1", "10.0.0.2", "10.0.0.3", "::1"]),
    port=st.integers(1, 65535),
    health=st.sampled_from(list(Health)),
    weight=st.integers(1, 100),
    zone=st.sampled_from(["", "a", "b"]),
    name=st.sampled_from(["", "x"]),
)


def test_declared_clusters_exist_empty_and_the_cache_starts_not_ready() -> None:
    cache = EndpointCache(["triton", "batcher"])
    assert not cache.ready
    assert set(cache.clusters()) == {"triton", "batcher"}
    assert cache.get("triton") is not None
    assert cache.get("triton").endpoints == ()  # type: ignore[union-attr]


def test_mark_ready_notifies_once_with_every_cluster() -> None:
    cache = EndpointCache(["triton"])
    seen: list[frozenset[str]] = []
    cache.subscribe(seen.append)
    cache.mark_ready()
    cache.mark_ready()
    assert cache.ready
    assert seen == [frozenset({"triton"})]


def test_a_change_bumps_the_revision_and_notifies_the_changed_names_only() -> None:
    cache = EndpointCache(["triton", "batcher"])
    seen: list[frozenset[str]] = []
    unsubscribe = cache.subscribe(seen.append)
    before = cache.revision
    assert cache.set_cluster("triton", [A])
    assert cache.revision == before + 1
    assert seen == [frozenset({"triton"})]
    assert not cache.set_cluster("triton", [A])  # same content: no change, no notification
    assert len(seen) == 1
    unsubscribe()
    cache.set_cluster("triton", [A, B])
    assert len(seen) == 1


def test_version_depends_on_content_not_order_or_duplicates() -> None:
    one = cluster_state("triton", [A, B])
    other = cluster_state("triton", [B, A, A])
    assert one.version == other.version
    assert one.endpoints == (A, B)
    assert cluster_state("triton", [A]).version != one.version
    assert cluster_state("batcher", [A, B]).version != one.version  # the name is content too


def test_every_field_is_part_of_the_version() -> None:
    base = cluster_state("t", [A]).version
    for changed in (
        Endpoint("10.0.0.9", 8001),
        Endpoint("10.0.0.1", 8002),
        Endpoint("10.0.0.1", 8001, Health.DRAINING),
        Endpoint("10.0.0.1", 8001, weight=3),
        Endpoint("10.0.0.1", 8001, zone="z"),
        Endpoint("10.0.0.1", 8001, name="n"),
    ):
        assert cluster_state("t", [changed]).version != base


def test_a_later_entry_for_the_same_address_wins() -> None:
    draining = Endpoint("10.0.0.1", 8001, Health.DRAINING)
    assert normalise([A, draining]) == (draining,)


def test_replace_removes_unnamed_clusters_and_empties_declared_ones() -> None:
    cache = EndpointCache(["triton"])
    cache.update({"triton": [A], "extra": [B]})
    changed = cache.replace({"other": [A]})
    assert changed == {"triton", "extra", "other"}
    assert set(cache.clusters()) == {"triton", "other"}
    assert cache.get("triton").endpoints == ()  # type: ignore[union-attr]


def test_remove_cluster() -> None:
    cache = EndpointCache(["triton"])
    cache.update({"triton": [A], "extra": [B]})
    assert cache.remove_cluster("extra")
    assert cache.get("extra") is None
    assert cache.remove_cluster("triton")  # declared: emptied, still there
    assert cache.get("triton") is not None
    assert not cache.remove_cluster("triton")


def test_describe_counts_healthy_of_total() -> None:
    cache = EndpointCache(["triton"])
    cache.set_cluster("triton", [A, B])
    assert cache.describe() == "triton=1/2"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"address": ""}, "address"),
        ({"port": 0}, "port"),
        ({"port": 70000}, "port"),
        ({"weight": 0}, "weight"),
        ({"weight": 70000}, "weight"),
    ],
)
def test_invalid_endpoints_are_refused(kwargs: dict[str, object], message: str) -> None:
    fields: dict[str, object] = {"address": "10.0.0.1", "port": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        Endpoint(**fields)  # type: ignore[arg-type]


def test_an_empty_cluster_name_is_refused() -> None:
    with pytest.raises(ValueError, match="name"):
        EndpointCache().set_cluster("", [A])


@given(st.lists(endpoints, max_size=8), st.randoms())
def test_version_is_a_function_of_the_normalised_content(
    items: list[Endpoint], rnd: object
) -> None:
    shuffled = list(items)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    # Shuffling changes which duplicate wins; compare on unique addresses only.
    unique = list({e.key: e for e in items}.values())
    shuffled_unique = [e for e in shuffled if e in unique]
    assert cluster_state("c", unique).version == cluster_state("c", shuffled_unique).version
    assert content_version("c", normalise(unique)) == cluster_state("c", unique).version


@given(st.lists(endpoints, max_size=6), st.lists(endpoints, max_size=6))
def test_equal_versions_mean_equal_content(left: list[Endpoint], right: list[Endpoint]) -> None:
    a, b = cluster_state("c", left), cluster_state("c", right)
    assert (a.version == b.version) == (a.endpoints == b.endpoints)
