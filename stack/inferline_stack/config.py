"""Local stack configuration: ``INFERLINE_STACK_*`` environment variables or flags."""

from __future__ import annotations

from dataclasses import dataclass

from inferline.config import require

PREFIX = "INFERLINE_STACK"


@dataclass(frozen=True)
class StackConfig:
    run_dir: str = ".run"
    model_repository: str = "build/model_repository"
    model: str = "efficientnet_lite0"
    public_port: int = 8080
    middleman_metrics_port: int = 9180
    preprocess_port: int = 8091
    preprocess_metrics_port: int = 9181
    triton_grpc_port: int = 8001
    triton_http_port: int = 8000
    triton_metrics_port: int = 8002
    # Where images are decoded: "service" (the preprocess service) or "inprocess" (middleman).
    decode: str = "service"
    start_timeout_s: float = 180.0
    stop_grace_s: float = 20.0

    def __post_init__(self) -> None:
        for name in ("public_port", "middleman_metrics_port", "preprocess_port",
                     "preprocess_metrics_port", "triton_grpc_port", "triton_http_port",
                     "triton_metrics_port"):  # fmt: skip
            require(0 < getattr(self, name) < 65536, PREFIX, name, "must be a TCP port")
        require(self.decode in ("service", "inprocess"), PREFIX, "decode",
                "must be service or inprocess")  # fmt: skip
        require(self.start_timeout_s > 0, PREFIX, "start_timeout_s", "must be positive")
