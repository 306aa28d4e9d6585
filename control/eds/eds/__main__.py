"""python -m eds: the xDS control plane (ADS, EDS, CDS, LDS, RDS) for Envoy and gRPC clients."""

from __future__ import annotations

import asyncio
import sys

from eds import app
from eds.config import PREFIX, Config
from inferline import logs
from inferline.config import ConfigError, load
from inferline.metrics import start_metrics_server
from inferline.server import wait_for_signal


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
        asyncio.run(main(cfg))
    except (ConfigError, OSError) as error:
        sys.exit(f"eds: {error}")
