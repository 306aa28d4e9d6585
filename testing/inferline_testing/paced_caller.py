"""A paced caller as a process of its own, so that what it measures is the pipeline, not the
event loop of a load generator it would share (``inferline_testing.overload.crowds.paced_calls``).

    python -m inferline_testing.paced_caller --target HOST:PORT --duration S IMAGE...

Prints one JSON list of ``[sent, latency_s, error]``; ``sent`` is on the system-wide monotonic
clock (``time.monotonic``, which asyncio's loop time is on Linux), comparable across processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from demo_client.client import open_clients
from demo_client.load import image_requests, send


async def paced(
    target: str, images: Sequence[bytes], duration_s: float, pace_s: float, timeout_s: float
) -> list[tuple[float, float, str | None]]:
    """One caller, one request at a time, at most one every ``pace_s``."""
    loop = asyncio.get_running_loop()
    factory = image_requests(list(images))
    samples = []
    end = loop.time() + duration_s
    async with open_clients(target, 1) as (client,):
        await client.is_server_live()  # connected before the first measured request
        number = 0
        while (sent := loop.time()) < end:
            error, _ = await send(client, "classifier", factory(number), timeout_s)
            samples.append((sent, loop.time() - sent, error))
            number += 1
            await asyncio.sleep(max(sent + pace_s - loop.time(), 0.0))
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--duration", type=float, required=True)
    parser.add_argument("--pace", type=float, default=0.02)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("images", nargs="+", type=Path)
    args = parser.parse_args(argv)
    images = [path.read_bytes() for path in args.images]
    samples = asyncio.run(paced(args.target, images, args.duration, args.pace, args.timeout))
    sys.stdout.write(json.dumps(samples) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
