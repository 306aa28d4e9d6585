"""The port plan, said alike wherever a deployable states it. Each deployable installs alone
(Envoy's renderer, the control plane, the demo client, which may import no project code), so
each keeps its own defaults; this holds them to one plan: the local stack's defaults.

    Envoy  8080 public (middleman), 8081 preprocess, 8082 batcher, 8083 triton; admin 9901;
           9902 the kubelet's probe listener (Kubernetes)
    eds    18000 xDS
"""

from __future__ import annotations

from urllib.parse import urlsplit

from demo_client.commands.common import DEFAULT_TARGET
from demo_client.envoy_hosts import DEFAULT_ADMIN
from eds.config import Config as EdsConfig
from inferline_envoy import admin as envoy_admin
from inferline_envoy import proxyless
from inferline_envoy.params import DEFAULT_LISTENERS, PROFILES
from inferline_stack.config import StackConfig
from tools.cluster import verify

PLAN = StackConfig()


def test_envoys_renderer_listens_where_the_stack_says() -> None:
    assert PLAN.listeners == DEFAULT_LISTENERS
    for params in PROFILES.values():
        assert params.listeners == PLAN.listeners
        assert params.admin_port == PLAN.envoy_admin_port
        assert params.xds_port == PLAN.eds_port == EdsConfig().port


def test_every_client_finds_envoy_and_the_control_plane_at_the_plans_ports() -> None:
    public = PLAN.public_port
    assert urlsplit(f"//{DEFAULT_TARGET}").port == public  # the demo client
    for admin in (DEFAULT_ADMIN, envoy_admin.DEFAULT_ADMIN):
        assert urlsplit(admin).port == PLAN.envoy_admin_port
    assert (PLAN.envoy_admin_port, public) == (verify.ADMIN_PORT, verify.PUBLIC_PORT)
    assert f"127.0.0.1:{PLAN.eds_port}" == proxyless.DEFAULT_XDS_ADDRESS
