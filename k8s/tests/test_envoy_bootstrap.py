"""Envoy's bootstrap in the ConfigMap is the one template's Kubernetes render, and the real Envoy
accepts it.

k8s/base/envoy/envoy.yaml is committed (kustomize's configMapGenerator needs a file); it must be
exactly ``python -m inferline_envoy.config --kubernetes -o k8s/base/envoy/envoy.yaml``'s output,
so a template change that is not re-rendered fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from inferline_envoy import config as envoy_config
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
