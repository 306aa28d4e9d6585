"""TLS in the rendered bootstrap: the public listener's certificate, mTLS to the named hops and
to the control plane, and certificates read through watched SDS files."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from inferline_envoy.binary import validate
from inferline_envoy.params import KUBERNETES, LOCAL
from inferline_envoy.render import render
from inferline_stack import certs


def by_name(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in items}


def test_tls_serves_the_public_listener_and_mtls_reaches_the_named_hops(tmp_path: Path) -> None:
    made = certs.ensure(tmp_path)
    client = (str(made.cert(certs.CLIENT)), str(made.key(certs.CLIENT)))
    params = dataclasses.replace(
        LOCAL,
        public_tls_cert=str(made.cert(certs.PUBLIC)),
        public_tls_key=str(made.key(certs.PUBLIC)),
        upstream_tls_clusters="middleman,preprocess",
        upstream_tls_cert=client[0],
        upstream_tls_key=client[1],
        upstream_tls_ca=str(made.ca),
    )
    config = render(params)
    ok, output = validate(config)  # the real binary loads every certificate
    assert ok, output
    listeners = by_name(config["static_resources"]["listeners"])
    public = listeners["middleman"]["filter_chains"][0]["transport_socket"]["typed_config"]
    assert public["common_tls_context"]["alpn_protocols"] == ["h2", "http/1.1"]
    for inner in ("preprocess", "batcher", "triton"):  # loopback hops: plaintext
        assert "transport_socket" not in listeners[inner]["filter_chains"][0]
    clusters = by_name(config["static_resources"]["clusters"])
    expected = {"middleman": ("h2", "middleman"), "middleman-rest": ("http/1.1", "middleman"),
                "preprocess": ("h2", "preprocess")}  # fmt: skip
    for name, (alpn, san) in expected.items():
        context = clusters[name]["transport_socket"]["typed_config"]["common_tls_context"]
        assert context["alpn_protocols"] == [alpn]
        certificate = context["tls_certificates"][0]
        assert certificate["certificate_chain"]["filename"] == client[0]
        validation = context["validation_context"]
        assert validation["trusted_ca"]["filename"] == str(made.ca)
        assert validation["match_typed_subject_alt_names"][0]["matcher"] == {"exact": san}
    for plain in ("batcher", "triton", "xds"):
        assert "transport_socket" not in clusters[plain]
    assert "transport_socket" not in str(render(LOCAL))  # off unless given


def test_the_xds_stream_may_be_mtls_too(tmp_path: Path) -> None:
    made = certs.ensure(tmp_path)
    params = dataclasses.replace(
        KUBERNETES,
        upstream_tls_cert=str(made.cert(certs.CLIENT)),
        upstream_tls_key=str(made.key(certs.CLIENT)),
        upstream_tls_ca=str(made.ca),
        xds_tls=True,
    )
    config = render(params)
    ok, output = validate(config)
    assert ok, output
    clusters = by_name(config["static_resources"]["clusters"])
    context = clusters["xds"]["transport_socket"]["typed_config"]["common_tls_context"]
    assert context["alpn_protocols"] == ["h2"]
    assert context["tls_certificates"][0]["private_key"]["filename"] == params.upstream_tls_key
    validation = context["validation_context"]
    assert validation["match_typed_subject_alt_names"][0]["matcher"] == {"exact": "eds"}
    assert not any("transport_socket" in c for n, c in clusters.items() if n != "xds")


def test_certificates_may_come_from_watched_sds_files(tmp_path: Path) -> None:
    """With sds_dir, the renderer writes an SDS file per certificate beside the bootstrap (the
    public one; the upstream client certificate and CA), each watched through its directory."""
    made = certs.ensure(tmp_path / "certs")
    sds_dir, out = tmp_path / "sds", tmp_path / "envoy.yaml"
    result = subprocess.run(
        [sys.executable, "-m", "inferline_envoy.config", "--kubernetes", "--validate",
         "--public-tls-cert", str(made.cert(certs.PUBLIC)),
         "--public-tls-key", str(made.key(certs.PUBLIC)),
         "--upstream-tls-clusters", "middleman", "--xds-tls",
         "--upstream-tls-cert", str(made.cert(certs.CLIENT)),
         "--upstream-tls-key", str(made.key(certs.CLIENT)),
         "--upstream-tls-ca", str(made.ca), "--sds-dir", str(sds_dir), "-o", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr  # the real Envoy loaded every file
    config = yaml.safe_load(out.read_text())
    assert sorted(p.name for p in sds_dir.iterdir()) == [
        "public.sds.yaml", "upstream-ca.sds.yaml", "upstream.sds.yaml"
    ]  # fmt: skip
    watched = {"path": str(made.dir)}

    def secret_file(config_source: dict[str, Any], name: str) -> dict[str, Any]:
        assert config_source["name"] == name
        source = config_source["sds_config"]["path_config_source"]
        assert source == {"path": str(sds_dir / f"{name}.sds.yaml"), "watched_directory": watched}
        [resource] = yaml.safe_load(Path(source["path"]).read_text())["resources"]
        assert resource["name"] == name
        return dict(resource)

    listener = by_name(config["static_resources"]["listeners"])["middleman"]
    context = listener["filter_chains"][0]["transport_socket"]["typed_config"]
    [public] = context["common_tls_context"]["tls_certificate_sds_secret_configs"]
    resource = secret_file(public, "public")
    assert resource["tls_certificate"]["certificate_chain"] == {
        "filename": str(made.cert(certs.PUBLIC))
    }
    assert resource["tls_certificate"]["watched_directory"] == watched
    clusters = by_name(config["static_resources"]["clusters"])
    for name, san in (("middleman", "middleman"), ("middleman-rest", "middleman"), ("xds", "eds")):
        context = clusters[name]["transport_socket"]["typed_config"]["common_tls_context"]
        [client] = context["tls_certificate_sds_secret_configs"]
        resource = secret_file(client, "upstream")
        assert resource["tls_certificate"]["private_key"] == {
            "filename": str(made.key(certs.CLIENT))
        }
        validation = context["combined_validation_context"]
        names = validation["default_validation_context"]["match_typed_subject_alt_names"]
        assert names[0]["matcher"] == {"exact": san}
        resource = secret_file(validation["validation_context_sds_secret_config"], "upstream-ca")
        assert resource["validation_context"] == {
            "trusted_ca": {"filename": str(made.ca)}, "watched_directory": watched
        }  # fmt: skip
