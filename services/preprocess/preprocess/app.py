"""Wires configuration to the backends and the gRPC server; used by __main__, tests and benches."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from tritonclient.grpc import service_pb2_grpc

from inferline import admission
from inferline.imaging.decode import Geometry, Limits
from inferline.imaging.settings import default_sampling, video_limits
from inferline.server import RunningServer, start_server
from inferline.tls import server_tls
from preprocess import metrics
from preprocess.backends import BackendSettings
from preprocess.choice import Machine, choose, create, detect
from preprocess.config import Config
from preprocess.geometries import Decoders
from preprocess.service import PreprocessService, ServiceSettings

logger = logging.getLogger(__name__)

SERVICE_NAME = "inference.GRPCInferenceService"


@dataclass
class Preprocess:
    server: RunningServer
    service: PreprocessService
    decoders: Decoders

    @property
    def port(self) -> int:
        return self.server.port

    async def stop(self, grace: float) -> None:
        await self.server.stop(grace)
        self.service.close()
        self.decoders.close()


def backend_settings(config: Config) -> BackendSettings:
    return BackendSettings(
        geometry=Geometry(config.resize, config.crop),
        limits=Limits(config.max_image_bytes, config.max_pixels),
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
    for reason in ("requests", "bytes"):  # every series from 0
        metrics.REFUSED.labels(reason)
    for media in ("image", "video"):
        metrics.EXPIRED.labels(media)
    metrics.BACKEND.labels(images.name, "image").set(1)
    metrics.BACKEND.labels(video.name, "video").set(1)
    service = PreprocessService(
        decoders,
        ServiceSettings(
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
        ),
    )
    server = await start_server(
        "preprocess",
        config.port,
        [lambda s: service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(service, s)],
        [SERVICE_NAME],
        host=config.host,
        max_message_bytes=config.max_message_bytes,
        tls=server_tls(config),
    )
    return Preprocess(server, service, decoders)
