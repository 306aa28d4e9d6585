"""Write grafana/dashboards/*.json from the Python (``make dashboards``), or check them.

    python -m grafana.dashboards_src            # write what changed
    python -m grafana.dashboards_src --check    # exit 1 when a file is stale

``make dashboards`` then copies the files into the Kubernetes components (tools.monitoring_files).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from grafana.dashboards_src.generate import COMMAND, DASHBOARDS_DIR, stale, write
from tools.generated import Files


def _paths(names: list[str]) -> list[str]:
    return [str(DASHBOARDS_DIR / name) for name in names]


DASHBOARDS = Files("dashboard", lambda: _paths(stale()), lambda: _paths(write()), COMMAND)


def main(argv: Sequence[str] | None = None) -> int:
    return DASHBOARDS.main("python -m grafana.dashboards_src", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
