"""What Envoy sends the control plane, built for the tests: an EDS DiscoveryRequest (SotW)."""

from __future__ import annotations

from envoy_data_plane.envoy.config.core.v3 import Node
from envoy_data_plane.envoy.service.discovery.v3 import DiscoveryRequest
from envoy_data_plane.google.rpc import Status

from eds.resources import ENDPOINTS

NODE = "envoy-1"


def eds_request(
    *names: str, version: str = "", nonce: str = "", error: str = "", node: str = NODE
) -> DiscoveryRequest:
    """A subscription to ``names``; with ``version`` and ``nonce`` an ACK of that response, with
    ``error`` too a NACK saying it."""
    return DiscoveryRequest(
        node=Node(id=node),
        type_url=ENDPOINTS,
        resource_names=list(names),
        version_info=version,
        response_nonce=nonce,
        error_detail=Status(code=3, message=error) if error else None,
    )
