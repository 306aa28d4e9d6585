"""Envoy's bootstrap is rendered when its pod starts, by an init container running the one
template's renderer with the flags the base and each component give it; the real Envoy accepts
what every mix of components renders, and the files it names are where the pod mounts them.

Nothing rendered is committed: a template change reaches every overlay and component at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferline_envoy import binary as envoy_binary
from inferline_envoy.params import KUBERNETES
from inferline_envoy.template import dump
from inferline_stack import auth, certs
from k8s.tests.manifests import OVERLAYS, Bootstrap, envoy_bootstrap, find, render

# The Secrets' files, where the bootstrap names them (moved under a test folder to validate).
TLS_DIR, AUTH_DIR, BOOTSTRAP_DIR = "/etc/envoy-tls", "/etc/envoy-auth", "/etc/envoy"
MTLS_DIR = "/etc/inferline-tls"  # components/mtls: Envoy's client certificate and the CA


def mounts(objects: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """Envoy's container's mounts (volume -> path) and the pod's volumes by name."""
    pod = find(objects, "Deployment", "envoy")["spec"]["template"]["spec"]
    [envoy] = pod["containers"]
    return {m["name"]: m["mountPath"] for m in envoy["volumeMounts"]}, {
        v["name"]: v for v in pod["volumes"]
    }


def validate(bootstrap: Bootstrap, tmp_path: Path) -> None:
    """``envoy --mode validate`` on ``bootstrap``, its paths moved under ``tmp_path`` with real
    files where the Secrets would put theirs: `make certs`'s certificate, `make token`'s keys."""
    made = certs.ensure(tmp_path / "certs")
    keys = auth.ensure(tmp_path / "auth")
    secrets = (TLS_DIR, AUTH_DIR, MTLS_DIR)
    folders = {p: tmp_path / p.strip("/").replace("/", "-") for p in secrets}
    folders[BOOTSTRAP_DIR] = tmp_path / "envoy"
    for folder in folders.values():
        folder.mkdir()
    (folders[TLS_DIR] / "tls.crt").write_bytes(made.cert(certs.PUBLIC).read_bytes())
    (folders[TLS_DIR] / "tls.key").write_bytes(made.key(certs.PUBLIC).read_bytes())
    (folders[AUTH_DIR] / "jwks.json").write_bytes(keys.jwks.read_bytes())
    (folders[MTLS_DIR] / "tls.crt").write_bytes(made.cert(certs.CLIENT).read_bytes())
    (folders[MTLS_DIR] / "tls.key").write_bytes(made.key(certs.CLIENT).read_bytes())
    (folders[MTLS_DIR] / "ca.crt").write_bytes(made.ca.read_bytes())

    def moved(text: str) -> str:  # the Secrets' folders first: /etc/envoy is a prefix of both
        for path in secrets:
            text = text.replace(path, str(folders[path]))
        return text.replace(f"{BOOTSTRAP_DIR}/", f"{folders[BOOTSTRAP_DIR]}/")

    (folders[BOOTSTRAP_DIR] / "envoy.yaml").write_text(moved(bootstrap.text()), encoding="utf-8")
    for name, resource in bootstrap.sds.items():
        sds_dir = Path(moved(bootstrap.params.sds_dir))
        sds_dir.mkdir(exist_ok=True)
        (sds_dir / name).write_text(moved(dump(resource)), encoding="utf-8")
    ok, output = envoy_binary.validate(folders[BOOTSTRAP_DIR] / "envoy.yaml")
    assert ok, output


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_overlays_bootstrap_is_the_kubernetes_render_and_envoy_accepts_it(
    overlay: str, tmp_path: Path
) -> None:
    bootstrap = envoy_bootstrap(render(f"overlays/{overlay}"))
    assert bootstrap.params == KUBERNETES and not bootstrap.sds
    validate(bootstrap, tmp_path)


def test_the_bootstrap_dials_the_eds_service() -> None:
    """Envoy's ADS cluster is the eds Service's short name and port: Envoy's pod is in the same
    namespace, and its DNS search path completes the name (no namespace or cluster domain in the
    bootstrap); Envoy's resolver uses that path unless told not to."""
    objects = render("overlays/gpu")
    bootstrap = envoy_bootstrap(objects).config
    [xds] = [c for c in bootstrap["static_resources"]["clusters"] if c["name"] == "xds"]
    address = xds["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    service = find(objects, "Service", "eds")
    assert (
        service["metadata"]["namespace"]
        == find(objects, "Deployment", "envoy")["metadata"]["namespace"]
    )
    assert address["socket_address"] == {
        "address": service["metadata"]["name"],
        "port_value": service["spec"]["ports"][0]["port"],
    }
    assert xds["type"] == "STRICT_DNS"
    assert "dns_resolution_config" not in xds and "no_default_search_domain" not in str(xds)


def test_the_tls_component_serves_the_certificate_it_mounts(tmp_path: Path) -> None:
    objects = render("components/tls")
    bootstrap = envoy_bootstrap(objects)
    params = bootstrap.params
    assert params.sds_dir == f"{BOOTSTRAP_DIR}/sds"
    assert list(bootstrap.sds) == ["public.sds.yaml"]  # watched: a renewal is read again
    mounted, volumes = mounts(objects)
    assert mounted["bootstrap"] == str(Path(params.sds_dir).parent)
    assert mounted["public-tls"] == str(Path(params.public_tls_cert).parent) == TLS_DIR
    certificate = find(objects, "Certificate", "envoy-public-tls")
    assert volumes["public-tls"]["secret"]["secretName"] == certificate["spec"]["secretName"]
    namespace = find(objects, "Service", "envoy")["metadata"]["namespace"]
    assert f"envoy.{namespace}.svc.cluster.local" in certificate["spec"]["dnsNames"]
    validate(bootstrap, tmp_path)


def test_the_auth_component_checks_tokens_over_tls_with_the_secrets_keys(tmp_path: Path) -> None:
    objects = render("components/auth")
    bootstrap = envoy_bootstrap(objects)
    params = bootstrap.params
    assert params.public_tls_cert and params.auth_audiences == "inferline"  # tls's flags kept
    public = bootstrap.config["static_resources"]["listeners"][0]
    assert public["filter_chains"][0]["transport_socket"]["name"] == "envoy.transport_sockets.tls"
    manager = public["filter_chains"][0]["filters"][0]["typed_config"]
    assert manager["http_filters"][0]["name"] == "envoy.filters.http.jwt_authn"
    mounted, volumes = mounts(objects)
    assert mounted["jwks"] == str(Path(params.auth_jwks_file).parent) == AUTH_DIR
    assert volumes["jwks"]["secret"]["secretName"] == "envoy-jwks"
    assert "optional" not in volumes["jwks"]["secret"]  # no keys: no Envoy, not an open door
    validate(bootstrap, tmp_path)


def test_every_component_together_still_makes_one_bootstrap_envoy_accepts(tmp_path: Path) -> None:
    validate(envoy_bootstrap(render("everything")), tmp_path)


def test_the_mtls_component_dials_every_hop_and_eds_with_the_client_certificate(
    tmp_path: Path,
) -> None:
    objects = render("components/mtls")
    bootstrap = envoy_bootstrap(objects)
    params = bootstrap.params
    # Every hop of the in-pod placement that has a Service (no preprocess pool), and xDS.
    hops = {name for name, _ in params.listeners} & {
        o["metadata"]["name"] for o in objects if o["kind"] == "Service"
    }
    assert set(params.tls_clusters) == hops == {"middleman", "batcher", "triton"}
    assert params.xds_tls and params.sds_dir == f"{BOOTSTRAP_DIR}/sds"
    assert sorted(bootstrap.sds) == ["upstream-ca.sds.yaml", "upstream.sds.yaml"]
    mounted, volumes = mounts(objects)
    assert mounted["mtls"] == str(Path(params.upstream_tls_cert).parent) == MTLS_DIR
    assert Path(params.upstream_tls_ca).parent == Path(params.upstream_tls_key).parent
    certificate = find(objects, "Certificate", "envoy-client-tls")
    assert volumes["mtls"]["secret"]["secretName"] == certificate["spec"]["secretName"]
    assert certificate["spec"]["usages"][0] == "client auth"
    clusters = {c["name"]: c for c in bootstrap.config["static_resources"]["clusters"]}
    for name in (*hops, "middleman-rest", "xds"):
        assert clusters[name]["transport_socket"]["name"] == "envoy.transport_sockets.tls", name
    validate(bootstrap, tmp_path)
