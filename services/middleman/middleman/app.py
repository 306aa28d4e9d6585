"""Wires configuration to the stages and the gRPC server; used by __main__ and by tests."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import web

from inferline import capacity
from inferline.admission import Admission
from inferline.admission import Limits as AdmissionLimits
from inferline.imaging.settings import default_sampling, video_limits
from inferline.server import RunningServer
from inferline.servicer import serve
from inferline.tls import health_port, server_tls
from middleman import classifiers
from middleman.classifiers import Classifier, Classifiers
from middleman.config import IN_POD, REMOTE, Config
from middleman.frames import FrameSource, InProcessFrames
from middleman.pipeline import (
    InProcessPreprocessor,
    Preprocessor,
    RemotePreprocessor,
    TritonUpstream,
)
from middleman.remote_frames import PodFrames, RemoteFrames
from middleman.rest import RestApi
from middleman.service import ClassifierService
from middleman.video import VideoClassifier

logger = logging.getLogger(__name__)


@dataclass
class Middleman:
    server: RunningServer
    rest: RestApi
    rest_runner: web.AppRunner
    preprocess: Preprocessor | None
    frames: FrameSource
    upstream: TritonUpstream

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def rest_port(self) -> int:
        return int(self.rest_runner.addresses[0][1])

    async def stop(self, grace: float) -> None:
        """Both transports stop taking work (gRPC NOT_SERVING, REST not live), then finish
        what is in flight within ``grace``."""
        self.rest.live = False
        await self.server.stop(grace)
        await self.rest_runner.cleanup()
        if self.preprocess is not None:
            await self.preprocess.close()
        await self.frames.close()
        await self.upstream.close()


def make_preprocessor(config: Config) -> Preprocessor | None:
    """Where images are decoded; None for the in-pod placement (beside Triton)."""
    if config.decoding == IN_POD:
        logger.info("in-pod: images go encoded to %s, decoded beside Triton", config.triton_url)
        return None
    if config.decoding == REMOTE:
        logger.info("decoding at the preprocess service %s", config.preprocess_url)
        return RemotePreprocessor(config.preprocess_url, config.image_limits)
    logger.info("decoding in process on %d threads", config.decode_threads)
    return InProcessPreprocessor(config.image_limits, config.decode_threads)


def make_frame_source(config: Config, default: Classifier) -> FrameSource:
    """Video frames from the preprocess service's preprocess_video, decoded in process, or
    (in-pod) decoded and classified in a GPU pod."""
    geometry = default.geometry
    if config.decoding == IN_POD:
        return PodFrames(config.triton_url, default)
    if config.decoding == REMOTE:
        return RemoteFrames(config.preprocess_url, geometry)
    return InProcessFrames(
        geometry,
        video_limits(config),
        default_sampling(config),
        config.video_max_samples,
        config.video_chunk_frames,
        config.decode_threads,
    )


def admission_limits(config: Config) -> AdmissionLimits:
    return AdmissionLimits(
        config.max_inflight,
        config.max_inflight_bytes,
        floor=config.admission_floor,
        names=("INFERLINE_MIDDLEMAN_MAX_INFLIGHT", "INFERLINE_MIDDLEMAN_MAX_INFLIGHT_BYTES"),
    )


async def start(config: Config) -> Middleman:
    served = classifiers.load(config)  # a bad model card fails startup, naming the file
    preprocess = make_preprocessor(config)
    frames = make_frame_source(config, served.default)
    upstream = TritonUpstream(config.triton_url)
    service = ClassifierService(
        preprocess,
        upstream,
        served,
        config.max_batch,
        config.upstream_timeout_s,
        VideoClassifier(frames, upstream, served.default, config.upstream_timeout_s),
        Admission(admission_limits(config)),
        config.max_message_bytes,
        config.video_top_k,
        config.image_limits,
    )
    server = await serve(
        "middleman",
        config.port,
        service,
        host=config.host,
        max_message_bytes=config.max_message_bytes + capacity.FRAMING_BYTES,
        tls=server_tls(config),
        health_port=health_port(config),
        timing_as="middleman",
    )
    rest = RestApi(service, config.max_message_bytes)
    try:
        runner = await start_rest(rest, config)
    except BaseException:
        await server.stop(0)
        raise
    log_models(config.triton_url, served)
    return Middleman(server, rest, runner, preprocess, frames, upstream)


async def start_rest(rest: RestApi, config: Config) -> web.AppRunner:
    """KServe v2 HTTP/REST on ``config.rest_port`` (0 picks one), over (m)TLS as gRPC is."""
    runner = web.AppRunner(rest.application(), access_log=None, shutdown_timeout=config.grace_s)
    await runner.setup()
    tls = server_tls(config)
    ssl_context = None if tls is None else tls.ssl_context()
    try:
        await web.TCPSite(runner, config.host, config.rest_port, ssl_context=ssl_context).start()
    except OSError as exc:
        await runner.cleanup()
        raise OSError(
            f"middleman: cannot serve REST on {config.host}:{config.rest_port} ({exc.strerror}); "
            "set INFERLINE_MIDDLEMAN_REST_PORT"
        ) from None
    security = "plaintext" if tls is None else "mTLS" if tls.mutual else "TLS"
    logger.info(
        "middleman serving KServe v2 REST (%s) on %s:%d",
        security, config.host, int(runner.addresses[0][1]),
    )  # fmt: skip
    return runner


def log_models(upstream: str, served: Classifiers) -> None:
    for name, c in served.by_name.items():
        logger.info(
            "model %s: %s at %s, %d classes, shorter side %d, crop %d",
            name, c.model, upstream, len(c.labels), c.geometry.resize, c.geometry.crop,
        )  # fmt: skip
