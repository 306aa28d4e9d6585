"""Copy grafana/'s rules, dashboards and provisioning into k8s/components/monitoring/files.

    python -m tools.monitoring_files            # write the copies (``make k8s-files``)
    python -m tools.monitoring_files --check    # exit 1 when a copy differs from its source

kustomize reads no file outside the kustomization's root unless told to
(``--load-restrictor LoadRestrictionsNone``), and neither ``kubectl apply -k``, Argo CD nor Flux
tell it by default. So the monitoring component holds copies of the files it turns into
ConfigMaps, and ``k8s/tests/test_monitoring.py`` fails when one differs from grafana/'s, which
stays the one place to edit them (the local stack reads it).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "grafana"
COPIES = ROOT / "k8s" / "components" / "monitoring" / "files"
FILES = (
    "rules/recording.yml",
    "rules/alerts.yml",
    "provisioning/datasources/prometheus.yml",
    "provisioning/dashboards/inferline.yml",
    "dashboards/pipeline.json",
    "dashboards/scale-out.json",
    "dashboards/gpu.json",
)


def stale() -> list[str]:
    """The copies that are missing or differ from their source (relative names)."""
    return [
        name
        for name in FILES
        if not (COPIES / name).is_file()
        or (COPIES / name).read_bytes() != (SOURCE / name).read_bytes()
    ]


def write() -> list[str]:
    """Copy what is stale; the names copied."""
    copied = stale()
    for name in copied:
        (COPIES / name).parent.mkdir(parents=True, exist_ok=True)
        (COPIES / name).write_bytes((SOURCE / name).read_bytes())
    return copied


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.monitoring_files", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if a copy is stale")
    args = parser.parse_args(argv)
    if args.check:
        names = stale()
        for name in names:
            print(f"{COPIES / name} differs from grafana/{name}: run make k8s-files")
        return 1 if names else 0
    copied = write()
    print(f"copied {', '.join(copied)} into {COPIES}" if copied else "every copy is current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
