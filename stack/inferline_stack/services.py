"""What the local stack runs, in start order, and how to tell each one is ready."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from inferline_stack.config import StackConfig


@dataclass(frozen=True)
class Service:
    name: str
    argv: list[str]
    address: str  # gRPC host:port that answers KServe ServerReady / ModelReady
    model: str  # the model whose readiness means "up"
    env: dict[str, str] = field(default_factory=dict)
    metrics: str = ""


def python(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]


def services(config: StackConfig) -> list[Service]:
    triton = f"127.0.0.1:{config.triton_grpc_port}"
    preprocess = f"127.0.0.1:{config.preprocess_port}"
    remote_decode = config.decode == "service"
    started = [
        Service(
            name="triton",
            argv=python(
                "inferline_models.triton",
                f"--repository={config.model_repository}",
                f"--model={config.model}",
                f"--grpc-port={config.triton_grpc_port}",
                f"--http-port={config.triton_http_port}",
                f"--metrics-port={config.triton_metrics_port}",
            ),
            address=triton,
            model=config.model,
            metrics=f"http://127.0.0.1:{config.triton_metrics_port}/metrics",
        )
    ]
    if remote_decode:
        started.append(
            Service(
                name="preprocess",
                argv=python("preprocess"),
                address=preprocess,
                model="preprocess",
                env={
                    "INFERLINE_PREPROCESS_PORT": str(config.preprocess_port),
                    "INFERLINE_PREPROCESS_METRICS_PORT": str(config.preprocess_metrics_port),
                },
                metrics=f"http://127.0.0.1:{config.preprocess_metrics_port}/metrics",
            )
        )
    started.append(
        Service(
            name="middleman",
            argv=python("middleman"),
            address=f"127.0.0.1:{config.public_port}",
            model="classifier",
            env={
                "INFERLINE_MIDDLEMAN_PORT": str(config.public_port),
                "INFERLINE_MIDDLEMAN_METRICS_PORT": str(config.middleman_metrics_port),
                "INFERLINE_MIDDLEMAN_TRITON_URL": triton,
                "INFERLINE_MIDDLEMAN_TRITON_MODEL": config.model,
                "INFERLINE_MIDDLEMAN_PREPROCESS_URL": preprocess if remote_decode else "",
            },
            metrics=f"http://127.0.0.1:{config.middleman_metrics_port}/metrics",
        )
    )
    return started
