"""Control-plane configuration: ``INFERLINE_EDS_*`` environment variables or flags."""

from __future__ import annotations

from dataclasses import dataclass

from inferline.config import require
from inferline.tls import Served, require_tls

PREFIX = "INFERLINE_EDS"
SOURCES = ("file", "kubernetes")


@dataclass(frozen=True)
class Config(Served):
    # Listen address (xDS and /metrics) / xDS (ADS, EDS, CDS, LDS, RDS) over gRPC.
    host: str = "0.0.0.0"
    port: int = 18000
    metrics_port: int = 9183  # Prometheus /metrics
    # Where endpoints come from: "file" (the local stack) or "kubernetes" (EndpointSlices).
    source: str = "file"
    # Clusters that always exist (empty until a source fills them) and, for Kubernetes, the
    # Services whose EndpointSlices are watched: each of Envoy's clusters (middleman's REST port
    # is a cluster, and a Service, of its own).
    services: str = "middleman,middleman-rest,preprocess,batcher,triton"
    # The source file: the endpoints file the local stack writes, read every poll interval.
    endpoints_file: str = ".run/endpoints.yaml"
    poll_interval_s: float = 0.1
    namespace: str = ""  # empty: the pod's own namespace in a cluster, else "default"
    port_name: str = "grpc"  # the EndpointSlice port to use when a Service has several
    kubeconfig: str = ""  # empty: in-cluster config, else ~/.kube/config
    watch_timeout_s: int = 300  # seconds the API server keeps a watch open; then it is renewed
    grace_s: float = 2.0  # graceful-stop grace on SIGTERM

    def __post_init__(self) -> None:
        require(0 <= self.port < 65536, PREFIX, "port", "must be a TCP port (0 picks one)")
        require(0 <= self.metrics_port < 65536, PREFIX, "metrics_port", "must be a TCP port")
        require(self.source in SOURCES, PREFIX, "source", f"must be one of {', '.join(SOURCES)}")
        require(bool(self.service_names), PREFIX, "services", "must name at least one cluster")
        require(
            all(n.replace("-", "").replace("_", "").replace(".", "").isalnum()
                for n in self.service_names),
            PREFIX, "services", "comma-separated names: letters, digits, '-', '_', '.'",
        )  # fmt: skip
        require(
            self.source != "file" or bool(self.endpoints_file),
            PREFIX, "endpoints_file", "must be a path when the source is file",
        )  # fmt: skip
        require(0 < self.poll_interval_s <= 10, PREFIX, "poll_interval_s", "must be in (0, 10]")
        require(self.watch_timeout_s > 0, PREFIX, "watch_timeout_s", "must be positive")
        require(self.grace_s >= 0, PREFIX, "grace_s", "must not be negative")
        require_tls(self, PREFIX)

    @property
    def service_names(self) -> tuple[str, ...]:
        return tuple(n.strip() for n in self.services.split(",") if n.strip())
