"""Envoy's admin /clusters parsed and shown; the CLI when Envoy is not there."""

from __future__ import annotations

import pytest

from inferline_envoy import admin as envoy_admin

CLUSTERS_JSON = {
    "cluster_statuses": [
        {
            "name": "triton",
            "host_statuses": [
                {
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": 8011}},
                    "stats": [
                        {"name": "rq_total", "value": "12"},
                        {"type": "GAUGE", "name": "rq_active", "value": "2"},
                        {"type": "GAUGE", "name": "rq_pending_active"},
                    ],
                    "health_status": {"eds_health_status": "DRAINING"},
                    "weight": 1,
                    "hostname": "triton-1",
                    "locality": {"zone": "local"},
                },
                {
                    "address": {"socket_address": {"address": "127.0.0.1", "port_value": 8001}},
                    "stats": [{"name": "rq_total", "value": "40"}],
                    "health_status": {
                        "eds_health_status": "HEALTHY",
                        "failed_active_health_check": True,
                    },
                    "weight": 2,
                    "hostname": "triton-0",
                    "locality": {},
                },
            ],
        },
        {"name": "batcher"},
        {"name": "xds", "host_statuses": []},
    ]
}


def test_parse_clusters_and_the_status_table() -> None:
    by_cluster = envoy_admin.parse_clusters(CLUSTERS_JSON)
    first, second = by_cluster["triton"]
    assert (first.port, first.hostname, first.weight, first.rq_total) == (8001, "triton-0", 2, 40)
    assert first.flags == ("failed_active_health_check",) and not first.routable
    assert first.state == "failed_active_health_check"
    assert (second.eds_health, second.in_flight, second.zone) == ("DRAINING", 2, "local")
    assert second.state == "draining" and not second.routable
    assert by_cluster["batcher"] == []
    table = envoy_admin.format_table(by_cluster).splitlines()
    assert table[0].split() == [
        "cluster", "endpoint", "name", "zone", "weight", "state", "in", "flight", "requests",
    ]  # fmt: skip
    assert table[1].split() == ["batcher", "(no", "endpoints)"]
    assert "127.0.0.1:8011" in table[3] and "draining" in table[3]
    assert all("xds" not in line for line in table)


def test_the_admin_cli_says_when_envoy_is_not_there(capsys: pytest.CaptureFixture[str]) -> None:
    assert envoy_admin.main(["--admin", "http://127.0.0.1:9"]) == 3
    captured = capsys.readouterr()
    assert "Envoy admin http://127.0.0.1:9 is not answering" in captured.err
    assert captured.out == ""
