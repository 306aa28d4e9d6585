"""preprocess configuration: ``INFERLINE_PREPROCESS_*`` environment variables or flags."""

from __future__ import annotations

import os
from dataclasses import dataclass

from inferline import capacity
from inferline.config import require
from inferline.imaging.settings import (
    ImageFields,
    VideoFields,
    require_image_settings,
    require_video_settings,
)
from inferline.tls import Served, require_tls
from preprocess.shm import PREFIX as SHM_PREFIX

PREFIX = "INFERLINE_PREPROCESS"

BACKENDS = ("auto", "dali-gpu", "dali-cpu", "opencv")
SLOT_SIDE = 320  # the largest crop an automatic shared-memory slot holds max_batch images of


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Config(Served, ImageFields, VideoFields):
    # Listen address (gRPC and /metrics) / gRPC port.
    host: str = "0.0.0.0"
    port: int = 8091
    metrics_port: int = 9181  # Prometheus /metrics
    # auto: dali-gpu when DALI sees a GPU, else opencv (on a CPU it costs less than half of
    # dali-cpu's time per image, make bench-preprocess) | dali-gpu | dali-cpu | opencv.
    backend: str = "auto"
    # Decoding threads (opencv) or single-threaded DALI CPU pipelines; 0 = every usable core.
    workers: int = 0
    # dali-gpu: pipelines sharing the GPU (workers CPU threads in all) / which CUDA device.
    gpu_pipelines: int = 2
    device_id: int = 0
    # Geometries decoded at once (DALI builds pipelines for each); one more is FAILED_PRECONDITION.
    max_geometries: int = 4
    max_batch: int = 64  # images per request (and the DALI pipelines' batch size)
    # The message limit: middleman's public one plus a hop's framing (inferline.capacity).
    max_message_bytes: int = capacity.INNER_MESSAGE_BYTES
    # Requests (and their encoded bytes) decoding at once; more get RESOURCE_EXHAUSTED (sized
    # for what the middlemen in front may admit: inferline.capacity).
    max_inflight: int = capacity.PREPROCESS_INFLIGHT_REQUESTS
    max_inflight_bytes: int = capacity.PREPROCESS_INFLIGHT_BYTES
    # In-pod (docs/architecture.md, Placements): the pod's own Triton (127.0.0.1:8001); this
    # preprocess then runs beside it (same pod, same /dev/shm) and serves its models to the
    # batcher: encoded images in, decoded into shared memory, Triton's outputs (and ERRORS) out.
    # Empty: models preprocess and preprocess_video alone.
    triton_url: str = ""
    # In-pod: the file holding Triton's access token for its restricted shared-memory protocol
    # (re-read whenever regions are registered); empty: send none (a Triton without
    # --grpc-restricted-protocol).
    triton_token_file: str = ""
    # In-pod: call that Triton over mutual TLS with this service's own TLS_CERT, TLS_KEY and
    # TLS_CA (where Triton's gRPC port is reachable beyond the pod: the local stack with TLS on,
    # where loopback is every process's). Off: plaintext, for a Triton on the pod's loopback.
    triton_tls: bool = False
    # In-pod: the shared-memory ring /dev/shm/<prefix>-<i> (one prefix per pod: a second live
    # owner is refused); batches decoded or at Triton at once (one more waits for a slot); bytes
    # a slot holds (0: max_batch images of up to 320 x 320, any geometry to that size).
    shm_prefix: str = "inferline-preprocess"
    shm_slots: int = 4
    shm_slot_bytes: int = 0
    grace_s: float = 5.0  # graceful-stop grace on SIGTERM

    def __post_init__(self) -> None:
        require(0 <= self.port < 65536, PREFIX, "port", "must be a TCP port (0 picks one)")
        require(0 <= self.metrics_port < 65536, PREFIX, "metrics_port", "must be a TCP port")
        require(
            self.backend in BACKENDS, PREFIX, "backend", f"must be one of {', '.join(BACKENDS)}"
        )
        require(self.workers >= 0, PREFIX, "workers", "must be >= 0 (0 = every usable core)")
        require(self.gpu_pipelines > 0, PREFIX, "gpu_pipelines", "must be at least 1")
        require(self.device_id >= 0, PREFIX, "device_id", "must be >= 0")
        require(self.max_geometries > 0, PREFIX, "max_geometries", "must be at least 1")
        require(self.max_batch > 0, PREFIX, "max_batch", "must be at least 1")
        for name in ("max_message_bytes", "max_inflight", "max_inflight_bytes"):
            require(getattr(self, name) > 0, PREFIX, name, "must be positive")
        require_image_settings(self, PREFIX, self.max_message_bytes)
        require_video_settings(self, PREFIX)
        require(self.shm_slots > 0, PREFIX, "shm_slots", "must be at least 1")
        require(self.shm_slot_bytes >= 0, PREFIX, "shm_slot_bytes", "must be >= 0 (0: automatic)")
        require(
            bool(SHM_PREFIX.match(self.shm_prefix)),
            PREFIX,
            "shm_prefix",
            "must be letters, digits, '_', '.' or '-' (a file name under /dev/shm)",
        )
        require(self.grace_s >= 0, PREFIX, "grace_s", "must not be negative")
        require_tls(self, PREFIX)
        require(
            not self.triton_tls or bool(self.tls_cert and self.tls_ca),
            PREFIX,
            "triton_tls",
            "needs this service's certificate, key and CA (INFERLINE_PREPROCESS_TLS_CERT, "
            "_TLS_KEY and _TLS_CA): they are what Triton is called with",
        )

    @property
    def slot_bytes(self) -> int:
        return self.shm_slot_bytes or self.max_batch * 3 * SLOT_SIDE * SLOT_SIDE

    @property
    def threads(self) -> int:
        return self.workers or usable_cores()
