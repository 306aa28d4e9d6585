"""Copy grafana/'s rules, dashboards and provisioning into the monitoring components' files/.

    python -m tools.monitoring_files            # write the copies (``make k8s-files``)
    python -m tools.monitoring_files --check    # exit 1 when a copy differs from its source

kustomize reads no file outside the kustomization's root unless told to
(``--load-restrictor LoadRestrictionsNone``), and neither ``kubectl apply -k``, Argo CD nor Flux
tell it by default. So the components hold copies of the files they turn into ConfigMaps —
components/monitoring all of them, components/monitoring-operator the dashboards (for the
Grafana of kube-prometheus-stack) — and ``k8s/tests/test_monitoring.py`` fails when one differs
from grafana/'s, which stays the one place to edit them (the local stack reads it; the
dashboards' JSON is generated there by ``make dashboards``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from tools.generated import Files

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "grafana"
COMPONENTS = ROOT / "k8s" / "components"
COPIES = COMPONENTS / "monitoring" / "files"
OPERATOR_COPIES = COMPONENTS / "monitoring-operator" / "files"
DASHBOARDS = (
    "dashboards/pipeline.json",
    "dashboards/scale-out.json",
    "dashboards/gpu.json",
)
FILES = (
    "rules/recording.yml",
    "rules/alerts.yml",
    "provisioning/datasources/prometheus.yml",
    "provisioning/dashboards/inferline.yml",
    *DASHBOARDS,
)
OPERATOR_FILES = DASHBOARDS
# Each component's folder of copies: the names (under grafana/) it holds.
DESTINATIONS = {COPIES: FILES, OPERATOR_COPIES: OPERATOR_FILES}


def pairs() -> Iterator[tuple[Path, Path]]:
    """Every file to copy: (its source under grafana/, its copy)."""
    for folder, names in DESTINATIONS.items():
        for name in names:
            yield SOURCE / name, folder / name


def differs(source: Path, copy: Path) -> bool:
    return not copy.is_file() or copy.read_bytes() != source.read_bytes()


def stale() -> list[str]:
    """The copies that are missing or differ from their source (paths under the repository)."""
    return [str(copy.relative_to(ROOT)) for source, copy in pairs() if differs(source, copy)]


def write() -> list[str]:
    """Copy what is stale; the copies written (paths under the repository)."""
    copied = []
    for source, copy in pairs():
        if differs(source, copy):
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_bytes(source.read_bytes())
            copied.append(str(copy.relative_to(ROOT)))
    return copied


FILES_CLI = Files("copy", stale, write, "make k8s-files")


def main(argv: Sequence[str] | None = None) -> int:
    return FILES_CLI.main("python -m tools.monitoring_files", __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
