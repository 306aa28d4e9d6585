"""The template's parameters: every one used, placeholders filled, bad values refused, and
each a flag of the command line."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from inferline_envoy.params import LOCAL
from inferline_envoy.template import substitute, template_text


def test_placeholders_keep_types_and_unknown_ones_fail() -> None:
    assert substitute({"a": "${n}", "b": "x${n}y", "c": ["${s}"]}, {"n": 3, "s": "t"}) == {
        "a": 3,
        "b": "x3y",
        "c": ["t"],
    }
    with pytest.raises(KeyError, match="nope"):
        substitute("${nope}", {})


def test_the_template_uses_every_parameter() -> None:
    text = template_text()
    names = list(LOCAL.values())
    assert "health_check_interval" in names and "xds_port" in names  # the loop has work
    for name in names:
        assert "${" + name + "}" in text, name


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"xds_api": "REST"}, "xds_api"),
        ({"listeners": ()}, "at least one"),
        ({"admin_port": 8080}, "must differ"),
        ({"listeners": (("a", 1), ("a", 2))}, "two listeners"),
        ({"admin_port": 0}, "not a TCP port"),
        ({"public_tls_cert": "/a.crt"}, "both public_tls_cert and public_tls_key"),
        ({"upstream_tls_clusters": "middleman"}, "needs upstream_tls_cert"),
        ({"xds_tls": True}, "needs upstream_tls_cert"),
        ({"sds_dir": "/etc/envoy/sds"}, "sds_dir needs a certificate"),
        ({"upstream_tls_clusters": "nope"}, r"no listener has cluster \['nope'\]"),
        ({"auth_issuer": "someone"}, "need auth_jwks_file"),
        ({"otlp_endpoint": "https://collector:4318/v1/traces"}, "must be an http:// URL"),
        ({"otlp_endpoint": "collector:4317"}, "must be an http:// URL"),
        ({"otlp_protocol": "http/json"}, "otlp_protocol must be one of"),
        ({"trace_sampling_percent": 101.0}, "within 0-100"),
        ({"otlp_headers": "x-api-key"}, "otlp_headers: expected key=value"),
    ],
)
def test_bad_parameters_are_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(LOCAL, **changes)


def test_the_cli_renders_validates_and_overrides(tmp_path: Path) -> None:
    out = tmp_path / "envoy.yaml"
    result = subprocess.run(
        [
            sys.executable, "-m", "inferline_envoy.config", "--kubernetes", "--validate",
            "--xds-address", "eds.example:18001", "--xds-api", "DELTA_GRPC",
            "--listener", "triton=9083", "--admin-port", "9911", "--no-shed", "-o", str(out),
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stderr
    config = yaml.safe_load(out.read_text())
    assert config["dynamic_resources"]["ads_config"]["api_type"] == "DELTA_GRPC"
    assert [li["name"] for li in config["static_resources"]["listeners"]] == ["triton", "probe"]
    assert config["admin"]["address"]["socket_address"]["port_value"] == 9911
    assert "admission_control" not in out.read_text()  # --no-shed (shedding is on by default)


def test_the_cli_explains_a_bad_value() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "inferline_envoy.config", "--local", "--listener", "triton"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 2 and "cluster=port" in result.stderr
