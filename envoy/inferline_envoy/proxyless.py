"""Proxyless gRPC: the xDS bootstrap that lets a grpcio channel dial ``xds:///triton``.

The control plane serves the Listener, RouteConfiguration, Cluster and ClusterLoadAssignment
that gRPC's xDS client asks for, so a client (the batcher, say) can balance over the Triton
replicas itself, per request, with no Envoy in between:

    python -m inferline_envoy.proxyless --xds-address 127.0.0.1:18000 -o .run/xds-bootstrap.json
    GRPC_XDS_BOOTSTRAP=.run/xds-bootstrap.json INFERLINE_BATCHER_TRITON_URL=xds:///triton ...

gRPC reads the bootstrap once per process, from the file named by ``GRPC_XDS_BOOTSTRAP`` or
the JSON in ``GRPC_XDS_BOOTSTRAP_CONFIG``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BOOTSTRAP_FILE_ENV = "GRPC_XDS_BOOTSTRAP"
BOOTSTRAP_CONFIG_ENV = "GRPC_XDS_BOOTSTRAP_CONFIG"


def bootstrap(xds_address: str, node_id: str = "inferline-grpc", zone: str = "") -> dict[str, Any]:
    """gRPC's xDS bootstrap for a control plane at ``xds_address`` (host:port, plaintext)."""
    node: dict[str, Any] = {"id": node_id, "cluster": "inferline"}
    if zone:
        node["locality"] = {"zone": zone}
    return {
        "xds_servers": [
            {
                "server_uri": xds_address,
                "channel_creds": [{"type": "insecure"}],
                # xds_v3: speak v3. ignore_resource_deletion: keep using a Listener or Cluster
                # if a misconfigured control plane stops sending it (gRPC A53).
                "server_features": ["xds_v3", "ignore_resource_deletion"],
            }
        ],
        "node": node,
    }


def write_bootstrap(path: Path, xds_address: str, node_id: str = "inferline-grpc") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(bootstrap(xds_address, node_id), indent=2) + "\n")
    return path


DEFAULT_XDS_ADDRESS = "127.0.0.1:18000"  # the local stack's control plane


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m inferline_envoy.proxyless", description=__doc__
    )
    parser.add_argument(
        "--xds-address", default=DEFAULT_XDS_ADDRESS, help="control plane host:port"
    )
    parser.add_argument("--node-id", default="inferline-grpc")
    parser.add_argument("--output", "-o", type=Path, help="write here instead of stdout")
    args = parser.parse_args(argv)
    if args.output:
        write_bootstrap(args.output, args.xds_address, args.node_id)
    else:
        sys.stdout.write(json.dumps(bootstrap(args.xds_address, args.node_id), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
