"""Wires configuration to the backends and the gRPC server; used by __main__, tests and benches."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from inferline import admission
from inferline.imaging.settings import default_sampling, video_limits
from inferline.server import RunningServer
from inferline.servicer import serve
from inferline.tls import health_port, server_tls
from preprocess import metrics
from preprocess.backends import BackendSettings
from preprocess.choice import Machine, choose, create, detect
from preprocess.config import Config
from preprocess.geometries import Decoders
from preprocess.local_triton import LocalTriton
from preprocess.pod import PodService, watch_health
from preprocess.service import PreprocessService, ServiceSettings
from preprocess.shm import SharedMemoryRing

logger = logging.getLogger(__name__)


@dataclass
class Preprocess:
    server: RunningServer
    service: PreprocessService
    decoders: Decoders
    pod: Pod | None = None

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace: float) -> None:
        if self.pod is not None:
            await self.pod.stop_watching()
        await self.server.stop(grace)
        self.service.close()
        self.decoders.close()
        if self.pod is not None:
            await self.pod.close()


@dataclass
class Pod:
    """Beside Triton: the ring, the client of the pod's Triton, the health watcher."""

    ring: SharedMemoryRing
    triton: LocalTriton
    stop: asyncio.Event
    watcher: asyncio.Task[None] | None = None

    @classmethod
    def create(cls, config: Config) -> Pod:
        ring = SharedMemoryRing(config.shm_prefix, config.shm_slots, config.slot_bytes)
        if ring.reclaimed:
            logger.info("reclaimed %d bytes of shared memory a killed preprocess left",
                        ring.reclaimed)  # fmt: skip
        metrics.SHM_SLOTS.set_function(lambda: ring.in_use)
        tls = server_tls(config) if config.triton_tls else None
        credentials = None if tls is None else tls.client_credentials()
        triton = LocalTriton(config.triton_url, config.triton_token_file, ring, credentials)
        return cls(ring, triton, asyncio.Event())

    async def stop_watching(self) -> None:
        self.stop.set()
        if self.watcher is not None:
            await self.watcher

    async def close(self) -> None:
        await self.triton.unregister()
        self.ring.close()
        await self.triton.close()


def backend_settings(config: Config) -> BackendSettings:
    return BackendSettings(
        geometry=config.geometry,
        limits=config.image_limits,
        video_limits=video_limits(config),
        workers=config.threads,
        max_batch=config.max_batch,
        gpu_pipelines=config.gpu_pipelines,
        device_id=config.device_id,
        video_chunk=config.video_chunk_frames,
    )


async def start(config: Config, machine: Machine | None = None) -> Preprocess:
    """Choose and build the backends (raises BackendUnavailable), then serve on ``config.port``."""
    machine = machine or detect()
    name = choose(config.backend, machine)
    settings = backend_settings(config)
    decoders = Decoders(name, settings, config.max_geometries, create)
    images, video = await asyncio.to_thread(decoders.build_default)  # builds DALI pipelines
    logger.info(
        "backend %s (configured %r; DALI %s, %d GPU(s) visible); video backend %s; "
        "%d worker(s); output [N, 3, %d, %d] from shorter side %d",
        images.name,
        config.backend,
        "installed" if machine.dali else "not installed",
        machine.gpus,
        video.name,
        settings.workers,
        config.crop,
        config.crop,
        config.resize,
    )
    for reason in ("requests", "bytes", "shared_memory"):  # every series from 0
        metrics.REFUSED.labels(reason)
    for media in ("image", "video"):
        metrics.EXPIRED.labels(media)
    for backend, media in ((images.name, "image"), (video.name, "video")):
        metrics.BACKEND.labels(backend, media).set(1)
        # from 0 too: in-pod, no tensor leaves over the network, and the series says so
        for counter in (metrics.BYTES_IN, metrics.BYTES_OUT):
            counter.labels(backend, media)
    service_settings = ServiceSettings(
        max_batch=config.max_batch,
        sampling=default_sampling(config),
        max_samples=config.video_max_samples,
        video_threads=settings.workers,
        max_stream_bytes=config.max_video_stream_bytes,
        video_chunk=config.video_chunk_frames,
        admission=admission.Admission(
            admission.Limits(
                config.max_inflight,
                config.max_inflight_bytes,
                names=(
                    "INFERLINE_PREPROCESS_MAX_INFLIGHT",
                    "INFERLINE_PREPROCESS_MAX_INFLIGHT_BYTES",
                ),
            )
        ),
    )
    pod = Pod.create(config) if config.triton_url else None
    service = (
        PreprocessService(decoders, service_settings)
        if pod is None
        else PodService(decoders, service_settings, pod.triton)
    )
    server = await serve(
        "preprocess",
        config.port,
        service,
        host=config.host,
        max_message_bytes=config.max_message_bytes,
        tls=server_tls(config),
        health_port=health_port(config),
        timing_as="",  # a batch's decode and infer (the GPU pod)
    )
    if pod is not None:
        await server.set_serving(False)  # until its Triton is ready and the ring registered
        pod.watcher = asyncio.create_task(watch_health(server, pod.triton, pod.stop))
        logger.info(
            "in-pod: serving Triton's models at %s, decoded batches in %d shared-memory slots "
            "of %d bytes (/dev/shm/%s-*)",
            config.triton_url, config.shm_slots, config.slot_bytes, config.shm_prefix,
        )  # fmt: skip
    return Preprocess(server, service, decoders, pod)
