"""The endpoints file: format, validation naming the entry, atomic and locked writes."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eds.cache import Endpoint, Health
from eds.sources import endpoints_file as ef

T0 = Endpoint("127.0.0.1", 8001, Health.HEALTHY, 1, "local", "triton-0")
T1 = Endpoint("127.0.0.1", 8011, Health.DRAINING, 2, "", "triton-1")


def test_the_documented_example_parses() -> None:
    text = """
clusters:
  triton:
    - {address: 127.0.0.1, port: 8001, health: HEALTHY, weight: 1, zone: local, name: triton-0}
    - {address: 127.0.0.1, port: 8011, health: draining, weight: 2, name: triton-1}
  batcher:
    - {address: 127.0.0.1, port: 8092}
  preprocess: []
"""
    clusters = ef.parse(text)
    assert clusters["triton"] == (T0, T1)
    assert clusters["batcher"] == (Endpoint("127.0.0.1", 8092),)
    assert clusters["preprocess"] == ()


def test_json_is_accepted_and_an_empty_file_has_no_clusters() -> None:
    data = {"clusters": {"triton": [{"address": "::1", "port": 8001}]}}
    assert ef.parse(json.dumps(data)) == {"triton": (Endpoint("::1", 8001),)}
    assert ef.parse("") == {}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("clusters: [", "not valid YAML"),
        ("- 1", "expected a mapping"),
        ("clusters: {}\nextra: 1", "unknown top-level"),
        ("clusters: {'bad name': []}", "cluster name"),
        ("clusters: {triton: {address: 1}}", "expected a list"),
        ("clusters: {triton: [1]}", r"triton'\[0\]: expected a mapping"),
        ("clusters: {triton: [{address: localhost, port: 1}]}", "not an IP address"),
        ("clusters: {triton: [{port: 1}]}", "'address'"),
        ("clusters: {triton: [{address: 1.2.3.4, port: 0}]}", "'port'"),
        ("clusters: {triton: [{address: 1.2.3.4, port: '80'}]}", "'port'"),
        ("clusters: {triton: [{address: 1.2.3.4, port: 1, health: SICK}]}", "health"),
        ("clusters: {triton: [{address: 1.2.3.4, port: 1, weight: 0}]}", "weight"),
        ("clusters: {triton: [{address: 1.2.3.4, port: 1, zone: 3}]}", "'zone'"),
        ("clusters: {triton: [{address: 1.2.3.4, port: 1, colour: red}]}", "unknown keys"),
        (
            "clusters: {triton: [{address: 1.2.3.4, port: 1}, {address: 1.2.3.4, port: 1}]}",
            r"triton'\[1\]: 1.2.3.4:1 is listed twice",
        ),
    ],
)
def test_invalid_files_fail_naming_the_entry(text: str, message: str) -> None:
    with pytest.raises(ef.EndpointsFileError, match=message):
        ef.parse(text, "endpoints.yaml")


def test_write_then_load_round_trips_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    path = tmp_path / "run" / "endpoints.yaml"
    ef.write(path, {"triton": [T0, T1], "batcher": []})
    assert ef.load(path) == {"triton": (T0, T1), "batcher": ()}
    assert sorted(p.name for p in path.parent.iterdir()) == ["endpoints.yaml"]
    assert path.read_text().startswith("#")


def test_write_replaces_the_file_by_rename(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    ef.write(path, {"triton": [T0]})
    before = path.stat().st_ino
    ef.write(path, {"triton": [T0, T1]})
    assert path.stat().st_ino != before  # a new file renamed over the old one


def test_set_health_and_remove(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    ef.set_endpoint(path, "triton", T0)
    ef.set_endpoint(path, "triton", T1)
    drained = ef.set_health(path, "triton", "127.0.0.1", 8001, Health.DRAINING)
    assert drained.health is Health.DRAINING and drained.name == "triton-0"
    assert ef.load(path)["triton"][0] == drained
    assert ef.remove_endpoint(path, "triton", "127.0.0.1", 8001)
    assert not ef.remove_endpoint(path, "triton", "127.0.0.1", 8001)
    assert ef.load(path) == {"triton": (T1,)}
    with pytest.raises(KeyError, match="8001"):
        ef.set_health(path, "triton", "127.0.0.1", 8001, Health.HEALTHY)


def test_set_endpoint_replaces_the_one_at_the_same_address(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    ef.set_endpoint(path, "triton", T0)
    heavier = Endpoint("127.0.0.1", 8001, weight=4)
    ef.set_endpoint(path, "triton", heavier)
    assert ef.load(path) == {"triton": (heavier,)}


def test_edits_from_many_threads_are_not_lost(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"

    def add(i: int) -> None:
        ef.set_endpoint(path, "triton", Endpoint("127.0.0.1", 9000 + i))

    threads = [threading.Thread(target=add, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ef.load(path)["triton"]) == 16


def test_a_failed_edit_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "endpoints.yaml"
    ef.write(path, {"triton": [T0]})
    with pytest.raises(RuntimeError), ef.edit(path) as clusters:
        clusters["triton"] = []
        raise RuntimeError("changed my mind")
    assert ef.load(path) == {"triton": (T0,)}


endpoint = st.builds(
    Endpoint,
    address=st.ip_addresses().map(str),
    port=st.integers(1, 65535),
    health=st.sampled_from(list(Health)),
    weight=st.integers(1, 65535),
    zone=st.text(max_size=5),
    name=st.text(max_size=5),
)
names = st.from_regex(r"[a-z][a-z0-9_.-]{0,8}", fullmatch=True)


@given(st.dictionaries(names, st.lists(endpoint, max_size=4, unique_by=lambda e: e.key)))
def test_dump_parse_round_trip(clusters: dict[str, list[Endpoint]]) -> None:
    assert ef.parse(ef.dump(clusters)) == {k: tuple(v) for k, v in clusters.items()}
