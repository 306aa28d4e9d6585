"""Serve the model repository's ONNX models with the real Triton server binary (PyTriton).

`python -m inferline_models.triton --repository build/model_repository --model efficientnet_lite0`
Runs until SIGTERM or SIGINT, then stops Triton (and its stub processes) before exiting.
`--model` may be given several times: one Triton server serves them all.

`--execution-provider cuda` or `tensorrt` runs the ONNX models on an NVIDIA GPU with ONNX Runtime's
CUDA or TensorRT execution provider (TensorRT as config.pbtxt asks of the official image: FP16,
one engine for batch 1..max_batch_size, cached under `--tensorrt-cache`); they need
onnxruntime-gpu and a CUDA GPU, and without them it exits 2 saying what to install.

`--model simulated_gpu` serves the *simulated* GPU (see `inferline_models.simulated`), alone or
beside repository models: no repository needed for it, a batch of b takes `--simulated-t0-ms` +
`--simulated-k-ms`·b.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import socket
import sys
import sysconfig
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from inferline import tracing
from inferline_models import server_wait
from inferline_models.binding import Binding
from inferline_models.repository import MAX_QUEUE_DELAY_US, MODEL_NAME
from inferline_models.simulated import K_MS, SIMULATED_MODEL, T0_MS, GpuTiming, simulated_binding
from inferline_models.simulated import MAX_BATCH_SIZE as SIMULATED_MAX_BATCH

logger = logging.getLogger(__name__)

LIVENESS_PERIOD_S = 1.0
# Triton's protected endpoints (statistics, repository, ...) take this token when it is set;
# otherwise PyTriton makes a random one. The simulated-GPU benchmark reads the statistics.
ACCESS_TOKEN_ENV = "INFERLINE_TRITON_ACCESS_TOKEN"
# Triton traces one in `rate` requests that carry no traceparent: none, in effect. Every request
# comes from the GPU pod, which passes a sampled batch's context on and decides for the rest.
TRACE_RATE_NEVER = 1_000_000_000
# Triton's OpenTelemetry settings for the SDK's batch processor variables.
_TRITON_BSP = {
    "OTEL_BSP_SCHEDULE_DELAY": "bsp_schedule_delay",
    "OTEL_BSP_MAX_QUEUE_SIZE": "bsp_max_queue_size",
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "bsp_max_export_batch_size",
}


def trace_config(environ: Mapping[str, str] = os.environ) -> list[str]:
    """tritonserver's ``--trace-config`` settings for the ``OTEL_*`` environment: Triton's
    OpenTelemetry tracing, to the services' collector, as service ``triton``; none while
    tracing is off. Triton traces every request that carries a traceparent, whatever its sampled
    flag (the pod passes on only a sampled one's), and exports OTLP/HTTP only."""
    if not tracing.enabled(environ):
        return []
    if tracing.protocol(environ) != "http/protobuf":
        logger.warning("Triton exports spans over OTLP http/protobuf only: its spans are left out")
        return []
    settings = [
        "mode=opentelemetry",
        "level=TIMESTAMPS",
        f"rate={TRACE_RATE_NEVER}",
        f"opentelemetry,url={tracing.traces_endpoint(environ)}",
        "opentelemetry,resource=service.name=triton",
    ]
    settings += [
        f"opentelemetry,{setting}={environ[variable]}"
        for variable, setting in _TRITON_BSP.items()
        if environ.get(variable)
    ]
    return settings


# --execution-provider: the keys of onnx_backend.EXECUTION_PROVIDERS (a test holds them equal),
# not imported from there so that serving only the simulated GPU never loads ONNX Runtime.
EXECUTION_PROVIDERS = ("cpu", "cuda", "tensorrt")


@dataclasses.dataclass(frozen=True)
class Ports:
    """Triton's listening ports."""

    grpc: int = 8001
    http: int = 8000
    metrics: int = 8002


def use_this_libpython() -> None:
    """Make PyTriton's Python backend stub load this interpreter's libpython.

    The stub links libpython3.X.so; found in the system library path it may be another build
    whose stdlib does not match this one (pyenv, conda), and the model then fails to load.
    tritonserver and its stubs inherit os.environ.
    """
    libdir = sysconfig.get_config_var("LIBDIR")
    if not libdir:
        return
    current = os.environ.get("LD_LIBRARY_PATH", "")
    if current.split(os.pathsep)[0] != libdir:
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, current) if p)


class StartupAborted(BaseException):
    """Raised in the main thread by SIGTERM/SIGINT while Triton is still starting.

    A BaseException, like KeyboardInterrupt, so that no `except Exception` in PyTriton eats it.
    """


def check_ports_free(address: str, ports: Ports) -> None:
    """Fail fast by name: tritonserver exits on a busy port, but PyTriton waits 120 s for it."""
    for name, port in dataclasses.asdict(ports).items():
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address, port))
            except OSError as e:
                raise OSError(f"{name} port {address}:{port} is not available: {e}") from e


@dataclasses.dataclass(frozen=True)
class GrpcTls:
    """TLS on Triton's gRPC port (its HTTP and metrics ports stay plaintext): the server's
    certificate and key, and with ``ca`` mutual TLS (clients need a certificate it signed)."""

    cert: Path
    key: Path
    ca: Path | None = None

    def __post_init__(self) -> None:
        for flag, path in (("--tls-cert", self.cert), ("--tls-key", self.key),
                           ("--tls-ca", self.ca)):  # fmt: skip
            if path is not None and not path.is_file():
                raise ValueError(f"{flag} {path}: no such file")

    def triton_config(self) -> dict[str, Any]:
        """TritonConfig's fields (tritonserver's --grpc-use-ssl and friends)."""
        return {
            "grpc_use_ssl": True,
            "grpc_server_cert": str(self.cert),
            "grpc_server_key": str(self.key),
            "grpc_root_cert": None if self.ca is None else str(self.ca),
            "grpc_use_ssl_mutual": self.ca is not None,
        }


def _drop_pytriton_spans() -> None:
    """PyTriton's own spans, which it makes around each Python model's call whenever Triton
    traces, are made and dropped. Its default tracer exports every call's (each without a
    parent a trace of its own, and its batch span marked sampled whatever the trace's decision),
    and it fails a call whose span does not record. Triton's spans of the model's call
    (``InferRequest``, the model, ``compute``) say what they would."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON
    from pytriton.proxy.telemetry import get_telemetry_tracer, set_telemetry_tracer

    if get_telemetry_tracer() is None:  # no span processor: nothing leaves
        set_telemetry_tracer(TracerProvider(sampler=ALWAYS_ON).get_tracer("pytriton"))


class LocalTriton:
    """The Triton server binary shipped by PyTriton, serving `bindings`; a context manager.
    ``trace_config``: tritonserver's ``--trace-config`` settings (:func:`trace_config`)."""

    def __init__(
        self,
        bindings: Sequence[Binding],
        ports: Ports,
        address: str = "0.0.0.0",
        access_token: str | None = None,
        workspace: Path | None = None,
        tls: GrpcTls | None = None,
        trace_config: Sequence[str] = (),
    ) -> None:
        from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

        self._names = [b.name for b in bindings]
        if trace_config:
            _drop_pytriton_spans()
        self._started = False
        self._ports = ports
        self._address = address
        use_this_libpython()
        server_wait.install()  # PyTriton's own wait for its server naps a second at a time
        self._triton = Triton(
            config=TritonConfig(
                grpc_address=address,
                grpc_port=ports.grpc,
                http_address=address,
                http_port=ports.http,
                metrics_port=ports.metrics,
                strict_readiness=True,
                exit_timeout_secs=10,
                # Accept the pings Envoy sends every second to find a replica that hangs, and
                # the keepalive pings of idle channels (as every inferline server does);
                # Triton's default answers a third one with GOAWAY "too_many_pings", and the
                # next call on that channel fails UNAVAILABLE.
                grpc_keepalive_permit_without_calls=True,
                grpc_http2_min_recv_ping_interval_without_data=500,
                grpc_http2_max_ping_strikes=0,
                trace_config=list(trace_config) or None,
                **(tls.triton_config() if tls else {}),
            ),
            security_config=TritonSecurityConfig(access_token=access_token or None),
            # PyTriton's sockets and model store: where the caller can find (and free) them
            # after a kill -9, rather than a random folder under ~/.cache/pytriton.
            workspace=workspace,
        )
        for b in bindings:
            self._triton.bind(
                model_name=b.name,
                infer_func=list(b.infer_funcs),
                inputs=list(b.inputs),
                outputs=list(b.outputs),
                config=b.config,
                strict=True,
            )

    def start(self) -> None:
        """Start tritonserver and load the models; returns once they are ready."""
        check_ports_free(self._address, self._ports)
        self._started = True
        self._triton.run()
        logger.info(
            "Triton serving %s on %s: gRPC :%d, HTTP :%d, metrics :%d",
            ", ".join(self._names),
            self._address,
            self._ports.grpc,
            self._ports.http,
            self._ports.metrics,
        )

    def wait(self, stop: threading.Event) -> bool:
        """Block until `stop` is set (True) or Triton or a model dies on its own (False)."""
        while not stop.wait(LIVENESS_PERIOD_S):
            if not self._triton.is_alive():
                logger.error("Triton or a model backend exited unexpectedly")
                return False
        return True

    def close(self) -> None:
        """Stop tritonserver (SIGINT, bounded wait) and remove PyTriton's workspace."""
        if self._started:
            logger.info("stopping Triton")
        if self._triton.stop():
            logger.info("Triton stopped")

    def __enter__(self) -> LocalTriton:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m inferline_models.triton",
        description="Serve a model repository's ONNX models (ONNX Runtime) with Triton.",
    )
    parser.add_argument("--repository", type=Path, default=Path("build/model_repository"))
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="MODEL",
        help=f"a model to serve; repeat for several (default: {MODEL_NAME})",
    )
    parser.add_argument("--address", default="0.0.0.0", help="gRPC and HTTP bind address")
    parser.add_argument(
        "--workspace",
        type=Path,
        default=None,
        help="PyTriton's workspace, a folder that must not exist yet (default: a new one under "
        "~/.cache/pytriton)",
    )
    parser.add_argument("--grpc-port", type=int, default=Ports.grpc)
    parser.add_argument("--http-port", type=int, default=Ports.http)
    parser.add_argument("--metrics-port", type=int, default=Ports.metrics)
    parser.add_argument("--instances", type=_positive, default=1, help="model instances")
    parser.add_argument(
        "--threads", type=_positive, default=None, help="ONNX Runtime threads per instance (cores)"
    )
    parser.add_argument("--max-queue-delay-us", type=_non_negative, default=MAX_QUEUE_DELAY_US)
    parser.add_argument(
        "--execution-provider",
        choices=EXECUTION_PROVIDERS,
        default="cpu",
        help="ONNX Runtime's: cpu, or on an NVIDIA GPU cuda or tensorrt (needs onnxruntime-gpu)",
    )
    parser.add_argument(
        "--tensorrt-cache",
        type=Path,
        default=None,
        help="where TensorRT engines are kept between starts (default: <tmp>/inferline-tensorrt)",
    )
    simulated = parser.add_argument_group(
        f"simulated GPU (--model {SIMULATED_MODEL}; ignores --repository, --threads and "
        "--execution-provider)"
    )
    simulated.add_argument("--simulated-t0-ms", type=_non_negative_float, default=T0_MS)
    simulated.add_argument("--simulated-k-ms", type=_non_negative_float, default=K_MS)
    simulated.add_argument("--max-batch-size", type=_positive, default=SIMULATED_MAX_BATCH)
    simulated.add_argument(
        "--no-dynamic-batching",
        action="store_true",
        help="turn Triton's dynamic batcher off (the batcher service batches instead)",
    )
    tls = parser.add_argument_group("TLS on the gRPC port (HTTP and metrics stay plaintext)")
    tls.add_argument("--tls-cert", type=Path, default=None, help="server certificate (PEM)")
    tls.add_argument("--tls-key", type=Path, default=None, help="its key (PEM)")
    tls.add_argument(
        "--tls-ca", type=Path, default=None, help="mutual TLS: clients' CA (PEM), required"
    )
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key) or (args.tls_ca and not args.tls_cert):
        parser.error("--tls-cert and --tls-key go together; --tls-ca needs them")
    # append adds to a list default instead of replacing it: default after parsing.
    args.models = list(dict.fromkeys(args.models or [MODEL_NAME]))
    return args


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _bindings(args: argparse.Namespace) -> list[Binding]:
    """One binding per ``--model``, in the order given."""
    return [_binding(args, model) for model in args.models]


def _binding(args: argparse.Namespace, model: str) -> Binding:
    if model == SIMULATED_MODEL:
        return simulated_binding(
            timing=GpuTiming(args.simulated_t0_ms, args.simulated_k_ms),
            max_batch_size=args.max_batch_size,
            max_queue_delay_us=None if args.no_dynamic_batching else args.max_queue_delay_us,
            instances=args.instances,
        )
    from inferline_models.onnx_backend import TENSORRT_CACHE, onnx_binding

    return onnx_binding(
        args.repository,
        model,
        instances=args.instances,
        threads=args.threads,
        max_queue_delay_us=args.max_queue_delay_us,
        provider=args.execution_provider,
        tensorrt_cache=args.tensorrt_cache or TENSORRT_CACHE,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("pytriton").setLevel(logging.WARNING)

    stop = threading.Event()
    starting = True

    def on_signal(signum: int, _frame: object) -> None:
        name = signal.Signals(signum).name
        logger.info("received %s", name)
        first = not stop.is_set()
        stop.set()
        if starting and first:  # interrupt startup once; never interrupt the cleanup
            raise StartupAborted(name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        bindings = _bindings(args)
        ports = Ports(grpc=args.grpc_port, http=args.http_port, metrics=args.metrics_port)
        token = os.environ.get(ACCESS_TOKEN_ENV)
        tls = GrpcTls(args.tls_cert, args.tls_key, args.tls_ca) if args.tls_cert else None
        with LocalTriton(
            bindings,
            ports,
            address=args.address,
            access_token=token,
            workspace=args.workspace,
            tls=tls,
            trace_config=trace_config(),
        ) as triton:
            triton.start()
            starting = False
            return 0 if triton.wait(stop) else 1
    except StartupAborted as e:
        logger.info("startup aborted by %s", e)
        return 0
    except (OSError, ValueError) as e:
        logger.error("cannot serve %s from %s: %s", ", ".join(args.models), args.repository, e)
        return 2


if __name__ == "__main__":
    sys.exit(main())
