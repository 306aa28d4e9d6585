"""The batcher's settings: a bad one fails by name, and the defaults."""

from __future__ import annotations

import pytest

from batcher.config import Config
from inferline.config import ConfigError, load


def test_config_fails_by_name() -> None:
    with pytest.raises(ConfigError, match="INFERLINE_BATCHER_MAX_INFLIGHT"):
        load(Config, "INFERLINE_BATCHER", environ={"INFERLINE_BATCHER_MAX_INFLIGHT": "0"})
    with pytest.raises(ConfigError, match="INFERLINE_BATCHER_MAX_QUEUE_DELAY_MS"):
        load(Config, "INFERLINE_BATCHER", environ={"INFERLINE_BATCHER_MAX_QUEUE_DELAY_MS": "x"})
    with pytest.raises(ConfigError, match="INFERLINE_BATCHER_MAX_BATCH_SIZE"):
        load(Config, "INFERLINE_BATCHER", argv=["--max-batch-size", "-1"])
    config = load(Config, "INFERLINE_BATCHER", environ={"INFERLINE_BATCHER_PORT": "9000"})
    assert (config.port, config.metrics_port, config.upstream_url) == (9000, 9182, "localhost:8001")
