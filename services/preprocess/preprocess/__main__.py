"""python -m preprocess: KServe v2 models ``preprocess`` (images) and ``preprocess_video``."""

from __future__ import annotations

import asyncio
import sys

import cv2

from inferline import logs
from inferline.config import ConfigError, load
from inferline.metrics import start_metrics_server
from inferline.server import wait_for_signal
from preprocess import app
from preprocess.backends import BackendUnavailable
from preprocess.config import PREFIX, Config


async def main(config: Config) -> None:
    metrics, _ = await start_metrics_server(config.metrics_port, config.host)
    running = await app.start(config)
    await wait_for_signal()
    await running.stop(config.grace_s)
    await metrics.cleanup()


if __name__ == "__main__":
    logs.setup()
    try:
        cfg = load(Config, PREFIX, sys.argv[1:], description=__doc__)
    except ConfigError as error:
        sys.exit(f"preprocess: {error}")
    cv2.setNumThreads(
        1
    )  # parallelism comes from our workers; OpenCV's own pool would oversubscribe
    try:
        asyncio.run(main(cfg))
    except BackendUnavailable as error:
        sys.exit(f"preprocess: INFERLINE_PREPROCESS_BACKEND: {error}")
