"""Discovery from the endpoints file the local stack rewrites (:mod:`eds.sources.endpoints_file`).

The file is polled: a change of inode, size or modification time means a new version (the
stack replaces it atomically by rename, so each poll sees a whole file). Polling every
100 ms keeps "endpoint written -> Envoy has it" well under a second with no inotify
dependency. A file that cannot be read or parsed is logged and counted, and the cache keeps
the last good content; the cache becomes ready with the first good read.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from eds import metrics
from eds.cache import EndpointCache
from eds.sources import endpoints_file

logger = logging.getLogger(__name__)

Signature = tuple[int, int, int, int]


class FileSource:
    name = "file"

    def __init__(self, cache: EndpointCache, path: Path, poll_interval_s: float = 0.1) -> None:
        self.cache = cache
        self.path = path
        self.poll_interval_s = poll_interval_s
        self._seen: Signature | None = None
        self._missing_logged = False

    def poll(self) -> bool:
        """Read the file if it changed since the last poll; True if the cache changed."""
        try:
            st = self.path.stat()
        except FileNotFoundError:
            if not self._missing_logged:
                logger.warning("endpoints file %s does not exist (yet); waiting for it", self.path)
                self._missing_logged = True
            return False
        except OSError as exc:
            return self._failed(f"cannot stat {self.path}: {exc}")
        signature = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        if signature == self._seen:
            return False
        self._seen = signature
        self._missing_logged = False
        try:
            clusters = endpoints_file.load(self.path)
        except endpoints_file.EndpointsFileError as exc:
            return self._failed(f"{exc}; keeping the previous endpoints")
        except (OSError, UnicodeDecodeError) as exc:
            self._seen = None  # try again next poll
            return self._failed(f"cannot read {self.path}: {exc}")
        changed = self.cache.replace(clusters)
        if changed:
            metrics.SOURCE_UPDATES.labels(self.name).inc()
            names = ", ".join(sorted(changed))
            logger.info("endpoints file: %s changed: %s", names, self.cache.describe())
        self.cache.mark_ready()
        return bool(changed)

    async def run(self) -> None:
        """Poll until cancelled."""
        logger.info("watching %s every %.0f ms", self.path, self.poll_interval_s * 1000)
        while True:
            self.poll()
            await asyncio.sleep(self.poll_interval_s)

    def _failed(self, message: str) -> bool:
        metrics.SOURCE_ERRORS.labels(self.name).inc()
        logger.error("endpoints file: %s", message)
        return False
