"""python -m middleman: the public KServe v2 endpoint (model ``classifier``)."""

from __future__ import annotations

import asyncio
import sys

from inferline import logs
from inferline.config import ConfigError, load
from inferline.metrics import start_metrics_server
from inferline.server import wait_for_signal
from middleman import app
from middleman.config import PREFIX, Config


async def main(config: Config) -> None:
    metrics, _ = await start_metrics_server(config.metrics_port)
    running = await app.start(config)
    await wait_for_signal()
    await running.stop(config.grace_s)
    await metrics.cleanup()


if __name__ == "__main__":
    logs.setup()
    try:
        cfg = load(Config, PREFIX, sys.argv[1:], description=__doc__)
    except ConfigError as error:
        sys.exit(f"middleman: {error}")
    asyncio.run(main(cfg))
