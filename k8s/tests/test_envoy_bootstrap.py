"""Envoy's bootstrap in the ConfigMap is the one template's Kubernetes render, and the real Envoy
accepts it.

k8s/base/envoy/envoy.yaml is committed (kustomize's configMapGenerator needs a file); it must be
exactly ``python -m inferline_envoy.config --kubernetes -o k8s/base/envoy/envoy.yaml``'s output,
so a template change that is not re-rendered fails here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from inferline_envoy import config as envoy_config
from inferline_stack import auth, certs
from k8s.tests.manifests import K8S, OVERLAYS, find, render

COMMITTED = K8S / "base" / "envoy" / "envoy.yaml"
RENDER = "python -m inferline_envoy.config --kubernetes -o k8s/base/envoy/envoy.yaml"


def test_the_committed_bootstrap_is_the_templates_render() -> None:
    expected = envoy_config.dump(envoy_config.render(envoy_config.KUBERNETES))
    assert COMMITTED.read_text(encoding="utf-8") == expected, f"stale: run `{RENDER}`"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_configmap_holds_the_committed_bootstrap(overlay: str) -> None:
    configmap = find(render(f"overlays/{overlay}"), "ConfigMap", "envoy-bootstrap")
    assert configmap["data"] == {"envoy.yaml": COMMITTED.read_text(encoding="utf-8")}


def test_real_envoy_validates_the_configmaps_bootstrap(tmp_path: Path) -> None:
    configmap = find(render("overlays/gpu"), "ConfigMap", "envoy-bootstrap")
    path = tmp_path / "envoy.yaml"
    path.write_text(configmap["data"]["envoy.yaml"], encoding="utf-8")
    ok, output = envoy_config.validate(path)
    assert ok, output


def test_the_bootstrap_dials_the_eds_service() -> None:
    """Envoy's ADS cluster is the eds Service's DNS name and port, in the base's namespace."""
    objects = render("overlays/gpu")
    bootstrap = yaml.safe_load(find(objects, "ConfigMap", "envoy-bootstrap")["data"]["envoy.yaml"])
    [xds] = [c for c in bootstrap["static_resources"]["clusters"] if c["name"] == "xds"]
    address = xds["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    service = find(objects, "Service", "eds")
    namespace = service["metadata"]["namespace"]
    assert address["socket_address"] == {
        "address": f"eds.{namespace}.svc.cluster.local",
        "port_value": service["spec"]["ports"][0]["port"],
    }
    assert xds["type"] == "STRICT_DNS"


# components/tls: the same bootstrap with the public listener's certificate from cert-manager's
# Secret (mounted at /etc/envoy-tls) through a watched SDS file beside the bootstrap.
TLS = K8S / "components" / "tls"
TLS_PARAMS = dataclasses.replace(
    envoy_config.KUBERNETES,
    public_tls_cert="/etc/envoy-tls/tls.crt",
    public_tls_key="/etc/envoy-tls/tls.key",
    public_tls_sds_file="/etc/envoy/public.sds.yaml",
)
TLS_RENDER = (
    "python -m inferline_envoy.config --kubernetes --public-tls-cert /etc/envoy-tls/tls.crt "
    "--public-tls-key /etc/envoy-tls/tls.key --public-tls-sds-file /etc/envoy/public.sds.yaml "
    "--sds-output k8s/components/tls/public.sds.yaml -o k8s/components/tls/envoy.yaml"
)


def test_the_tls_components_files_are_the_templates_render() -> None:
    bootstrap = envoy_config.dump(envoy_config.render(TLS_PARAMS))
    sds = envoy_config.dump(envoy_config.render_sds(TLS_PARAMS))
    assert (TLS / "envoy.yaml").read_text(encoding="utf-8") == bootstrap, f"run `{TLS_RENDER}`"
    assert (TLS / "public.sds.yaml").read_text(encoding="utf-8") == sds, f"run `{TLS_RENDER}`"


def test_the_tls_component_mounts_the_certificate_where_the_bootstrap_reads_it() -> None:
    objects = render("components/tls")
    configmap = find(objects, "ConfigMap", "envoy-bootstrap")
    assert configmap["data"] == {
        "envoy.yaml": (TLS / "envoy.yaml").read_text(encoding="utf-8"),
        "public.sds.yaml": (TLS / "public.sds.yaml").read_text(encoding="utf-8"),
    }
    pod = find(objects, "Deployment", "envoy")["spec"]["template"]["spec"]
    [envoy] = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in envoy["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["bootstrap"] == str(Path(TLS_PARAMS.public_tls_sds_file).parent)
    assert mounts["public-tls"] == str(Path(TLS_PARAMS.public_tls_cert).parent)
    certificate = find(objects, "Certificate", "envoy-public-tls")
    assert volumes["public-tls"]["secret"]["secretName"] == certificate["spec"]["secretName"]
    service = find(objects, "Service", "envoy")
    namespace = service["metadata"]["namespace"]
    assert f"envoy.{namespace}.svc.cluster.local" in certificate["spec"]["dnsNames"]


def test_real_envoy_serves_the_tls_components_bootstrap(tmp_path: Path) -> None:
    """The component's bootstrap, its paths moved under ``tmp_path`` (with certificates from
    `make certs` where the Secret would be), passes ``envoy --mode validate``, which loads the
    SDS file and the certificate it names."""
    configmap = find(render("components/tls"), "ConfigMap", "envoy-bootstrap")
    made = certs.ensure(tmp_path / "certs")
    secret, config = tmp_path / "envoy-tls", tmp_path / "envoy"
    secret.mkdir()
    config.mkdir()
    (secret / "tls.crt").write_bytes(made.cert(certs.PUBLIC).read_bytes())
    (secret / "tls.key").write_bytes(made.key(certs.PUBLIC).read_bytes())
    for name, text in configmap["data"].items():
        moved = text.replace("/etc/envoy-tls", str(secret)).replace("/etc/envoy/", f"{config}/")
        (config / name).write_text(moved, encoding="utf-8")
    ok, output = envoy_config.validate(config / "envoy.yaml")
    assert ok, output


# components/auth: the TLS bootstrap plus the token check, its key set from Secret envoy-jwks
# (mounted at /etc/envoy-auth).
AUTH = K8S / "components" / "auth"
AUTH_PARAMS = dataclasses.replace(
    TLS_PARAMS, auth_jwks_file="/etc/envoy-auth/jwks.json", auth_audiences="inferline"
)
AUTH_RENDER = "make k8s-envoy (its components/auth line)"


def test_the_auth_components_files_are_the_templates_render() -> None:
    bootstrap = envoy_config.dump(envoy_config.render(AUTH_PARAMS))
    sds = envoy_config.dump(envoy_config.render_sds(AUTH_PARAMS))
    assert (AUTH / "envoy.yaml").read_text(encoding="utf-8") == bootstrap, f"run {AUTH_RENDER}"
    assert (AUTH / "public.sds.yaml").read_text(encoding="utf-8") == sds, f"run {AUTH_RENDER}"


def test_the_auth_component_checks_tokens_over_tls_with_the_secrets_keys() -> None:
    objects = render("components/auth")
    configmap = find(objects, "ConfigMap", "envoy-bootstrap")
    assert configmap["data"]["envoy.yaml"] == (AUTH / "envoy.yaml").read_text(encoding="utf-8")
    bootstrap = yaml.safe_load(configmap["data"]["envoy.yaml"])
    public = bootstrap["static_resources"]["listeners"][0]
    assert public["filter_chains"][0]["transport_socket"]["name"] == "envoy.transport_sockets.tls"
    manager = public["filter_chains"][0]["filters"][0]["typed_config"]
    assert manager["http_filters"][0]["name"] == "envoy.filters.http.jwt_authn"
    pod = find(objects, "Deployment", "envoy")["spec"]["template"]["spec"]
    [envoy] = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in envoy["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["jwks"] == str(Path(AUTH_PARAMS.auth_jwks_file).parent)
    assert volumes["jwks"]["secret"]["secretName"] == "envoy-jwks"
    assert "optional" not in volumes["jwks"]["secret"]  # no keys: no Envoy, not an open door
    assert mounts["public-tls"] == str(Path(TLS_PARAMS.public_tls_cert).parent)  # tls's, kept


def test_real_envoy_serves_the_auth_components_bootstrap(tmp_path: Path) -> None:
    """The component's bootstrap, its paths moved under ``tmp_path`` (certificates from `make
    certs` and a key set from `make token` where the Secrets would be), passes ``envoy --mode
    validate``, which loads the key set."""
    configmap = find(render("components/auth"), "ConfigMap", "envoy-bootstrap")
    made = certs.ensure(tmp_path / "certs")
    keys = auth.ensure(tmp_path / "auth")
    secret, jwks, config = tmp_path / "envoy-tls", tmp_path / "envoy-auth", tmp_path / "envoy"
    for folder in (secret, jwks, config):
        folder.mkdir()
    (secret / "tls.crt").write_bytes(made.cert(certs.PUBLIC).read_bytes())
    (secret / "tls.key").write_bytes(made.key(certs.PUBLIC).read_bytes())
    (jwks / "jwks.json").write_bytes(keys.jwks.read_bytes())
    for name, text in configmap["data"].items():
        moved = text.replace("/etc/envoy-tls", str(secret)).replace("/etc/envoy/", f"{config}/")
        moved = moved.replace("/etc/envoy-auth", str(jwks))
        (config / name).write_text(moved, encoding="utf-8")
    ok, output = envoy_config.validate(config / "envoy.yaml")
    assert ok, output
