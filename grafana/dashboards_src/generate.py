"""The dashboards as JSON: rendered from the Python, written to grafana/dashboards/, or compared
with what is there."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from grafana.dashboards_src import gpu, pipeline, scale_out

DASHBOARDS_DIR = Path(__file__).resolve().parents[1] / "dashboards"
COMMAND = "make dashboards"

# Every dashboard: its file under grafana/dashboards/, and what builds it.
BUILDERS: dict[str, Callable[[], Dashboard]] = {
    pipeline.FILENAME: pipeline.build,
    scale_out.FILENAME: scale_out.build,
    gpu.FILENAME: gpu.build,
}


def to_json(board: Dashboard) -> str:
    """The file's text: keys sorted, two-space indents, UTF-8 as is, a final newline."""
    return json.dumps(board, cls=JSONEncoder, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render() -> dict[str, str]:
    """Every dashboard's file name and text."""
    return {filename: to_json(build()) for filename, build in BUILDERS.items()}


def stale(directory: Path = DASHBOARDS_DIR) -> list[str]:
    """The files in ``directory`` that are missing or differ from what the Python renders."""
    return [
        filename
        for filename, text in render().items()
        if not (directory / filename).is_file()
        or (directory / filename).read_text(encoding="utf-8") != text
    ]


def write(directory: Path = DASHBOARDS_DIR) -> list[str]:
    """Write the files that are stale; their names."""
    written = stale(directory)
    rendered = render()
    directory.mkdir(parents=True, exist_ok=True)
    for filename in written:
        (directory / filename).write_text(rendered[filename], encoding="utf-8")
    return written
