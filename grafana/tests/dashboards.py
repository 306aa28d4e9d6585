"""The provisioned Grafana dashboards, read back: their panels, queries and metric names.

Imported by the static tests (``test_dashboards.py``) and by the live test that runs every panel
query against a Prometheus scraping the running stack::

    from grafana.tests.dashboards import panel_queries

    for query in panel_queries(rate_interval="1m"):
        ...  # query.dashboard (uid), query.panel (title), query.expr, query.gpu_only

Variables are substituted as Grafana does with "All" chosen (``.*``, which matches a missing
label too); ``variable_queries()`` yields the query variables' ``label_values`` selectors. The
JSON is generated from grafana/dashboards_src (``make dashboards``).

A panel that can only have data on a machine with a GPU (Triton's ``nv_gpu_*``) or in
Kubernetes with the DCGM exporter (``DCGM_*``) is listed in :data:`GPU_ONLY_PANELS`, by
dashboard uid and panel title; ``test_dashboards.py`` checks that the list is exactly the panels
whose queries use such a metric.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, NamedTuple

GRAFANA_DIR = Path(__file__).resolve().parents[1]
DASHBOARDS_DIR = GRAFANA_DIR / "dashboards"
CATALOG = GRAFANA_DIR / "METRICS.md"
RECORDING_RULES = GRAFANA_DIR / "rules" / "recording.yml"

# Every dashboard, by uid: the file it lives in. Uids are stable (links and bookmarks use them).
DASHBOARDS = {
    "inferline-pipeline": "pipeline.json",
    "inferline-scale-out": "scale-out.json",
    "inferline-gpu": "gpu.json",
}

# What every panel and target names as its data source: the dashboard's `datasource` variable.
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# Metrics that exist only where there is a GPU (Triton's) or the DCGM exporter (Kubernetes).
GPU_METRIC_PREFIXES = ("nv_gpu_", "DCGM_")

# Panels with no data on a machine without a GPU: (dashboard uid, panel title).
GPU_ONLY_PANELS: frozenset[tuple[str, str]] = frozenset(
    {
        ("inferline-gpu", "GPU utilisation per replica (Triton)"),
        ("inferline-gpu", "GPU power per replica (Triton)"),
        ("inferline-gpu", "GPU memory used per replica (Triton)"),
        ("inferline-gpu", "GPU memory used per model (Triton)"),
        ("inferline-gpu", "GPU utilisation per pod (DCGM)"),
        ("inferline-gpu", "GPU memory used per pod (DCGM)"),
        ("inferline-gpu", "GPU power per pod (DCGM)"),
    }
)

# The services whose gRPC metrics the catalog writes as `inferline_<svc>_grpc_…`.
GRPC_SERVICES = ("middleman", "preprocess", "batcher", "eds")

Dashboard = dict[str, Any]
Panel = dict[str, Any]


class PanelQuery(NamedTuple):
    """One target of one panel, with the dashboard's variables substituted ("All" chosen)."""

    dashboard: str  # the dashboard's uid
    panel: str  # the panel's title
    expr: str  # PromQL, ready for Prometheus's HTTP API
    gpu_only: bool  # no data without a GPU (or, for DCGM, outside Kubernetes)


def load_dashboards(directory: Path = DASHBOARDS_DIR) -> dict[str, Dashboard]:
    """Every ``*.json`` dashboard in ``directory``, by uid."""
    dashboards: dict[str, Dashboard] = {}
    for path in sorted(directory.glob("*.json")):
        dashboard = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(dashboard, dict):
            raise ValueError(f"{path}: not a JSON object")
        uid = dashboard.get("uid")
        if not isinstance(uid, str) or not uid:
            raise ValueError(f"{path}: no uid")
        if uid in dashboards:
            raise ValueError(f"{path}: uid {uid!r} used twice")
        dashboards[uid] = dashboard
    return dashboards


def iter_panels(dashboard: Dashboard) -> Iterator[Panel]:
    """Every panel that shows data (rows left out, a collapsed row's panels included)."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def iter_rows(dashboard: Dashboard) -> Iterator[Panel]:
    """The dashboard's row panels."""
    return (panel for panel in dashboard.get("panels", []) if panel.get("type") == "row")


def all_values(dashboard: Dashboard) -> dict[str, str]:
    """Each multi-valued variable's value with "All" chosen (its ``allValue``), by name."""
    values: dict[str, str] = {}
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("includeAll"):
            if not isinstance(variable.get("allValue"), str):
                raise ValueError(f"variable {variable.get('name')!r}: includeAll, no allValue")
            values[str(variable["name"])] = variable["allValue"]
    return values


_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def substitute(
    expr: str, rate_interval: str = "1m", variables: Mapping[str, str] | None = None
) -> str:
    """``expr`` with Grafana's variables replaced as Grafana would, for Prometheus's API.

    ``$__rate_interval`` is at least four scrape intervals in Grafana (the datasource's
    ``timeInterval``); ``1m`` holds at least two samples at any scrape interval up to 30 s. A
    dashboard variable (``$namespace`` or ``${namespace}``) becomes its value in ``variables``
    (:func:`all_values`: "All", ``.*``); any other ``$…`` is left as it is.
    """
    values = {**(variables or {}), "__rate_interval": rate_interval}

    def value(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        return values.get(name, match[0])

    return _VARIABLE.sub(value, expr)


def panel_queries(
    rate_interval: str = "1m", directory: Path = DASHBOARDS_DIR
) -> Iterator[PanelQuery]:
    """Every target of every panel of every dashboard, variables substituted ("All")."""
    for uid, dashboard in load_dashboards(directory).items():
        variables = all_values(dashboard)
        for panel in iter_panels(dashboard):
            title = str(panel.get("title", ""))
            for target in panel.get("targets", []):
                yield PanelQuery(
                    uid,
                    title,
                    substitute(str(target.get("expr", "")), rate_interval, variables),
                    (uid, title) in GPU_ONLY_PANELS,
                )


class VariableQuery(NamedTuple):
    """A query variable's ``label_values(selector, label)``, its variables substituted."""

    dashboard: str  # the dashboard's uid
    variable: str  # the variable's name
    selector: str  # the series selector whose label values it lists
    label: str

    @property
    def expr(self) -> str:
        """PromQL with a series per value the variable lists."""
        return f"group by ({self.label}) ({self.selector})"


_LABEL_VALUES = re.compile(r"label_values\((.+),\s*(\w+)\)", re.DOTALL)


def variable_queries(directory: Path = DASHBOARDS_DIR) -> Iterator[VariableQuery]:
    """Every query variable of every dashboard ("All" chosen for those its query reads)."""
    for uid, dashboard in load_dashboards(directory).items():
        variables = all_values(dashboard)
        for variable in dashboard.get("templating", {}).get("list", []):
            if variable.get("type") != "query":
                continue
            text = variable.get("query")
            if isinstance(text, dict):  # Grafana's newer form: {"query": "…", "refId": …}
                text = text.get("query")
            match = _LABEL_VALUES.fullmatch(str(text).strip())
            if not match:
                raise ValueError(f"{uid}: variable {variable.get('name')!r} is not label_values")
            selector = substitute(match[1], variables=variables)
            yield VariableQuery(uid, str(variable["name"]), selector, match[2])


# -- metric names in PromQL ---------------------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_OFFSET = re.compile(r"\boffset\s+-?[0-9a-z]+\b")
_LABEL_LIST = re.compile(
    r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", re.IGNORECASE
)
_NUMBER = re.compile(r"(?<![\w:])(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+)")
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = frozenset(
    {
        "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
        "group_left", "group_right", "inf", "nan", "atan2",
    }
)  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (by a regex over it, not a full parser).

    Strings, label matchers, ranges, label lists (``by (…)``, ``on (…)``, …) and numbers are
    removed; what remains is functions and aggregations (an identifier followed by ``(``),
    keywords and metric names. A ``{__name__="…"}`` selector is not supported: write the name.
    """
    if "__name__" in expr:
        raise ValueError(f"select metrics by name, not by __name__: {expr}")
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _OFFSET.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    text = _NUMBER.sub(" ", text)
    names: set[str] = set()
    for match in _IDENTIFIER.finditer(text):
        name = match.group()
        rest = text[match.end() :].lstrip()
        if name.lower() in _KEYWORDS or rest.startswith("("):
            continue  # a keyword, or a function / aggregation
        if name in {"sum", "min", "max", "avg", "count", "group", "stddev", "stdvar"}:
            continue  # an aggregation whose `by (…)` came first: `sum by (x) (…)`
        names.add(name)
    return names


def catalog_names(catalog: Path = CATALOG) -> set[str]:
    """Every metric name the catalog (grafana/METRICS.md) lists, ``<svc>`` expanded."""
    text = catalog.read_text(encoding="utf-8")
    names: set[str] = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        if "<svc>" in token:
            names.update(token.replace("<svc>", service) for service in GRPC_SERVICES)
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token):
            names.add(token)
    return names


def catalog_labels(catalog: Path = CATALOG) -> dict[str, set[str]]:
    """The backticked words of each catalog table row's labels column (its label names, and
    some of their values), by metric name, ``<svc>`` expanded."""
    labels: dict[str, set[str]] = {}
    for line in catalog.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        words = set(re.findall(r"`(\w+)`", cells[2]))
        for token in re.findall(r"`([^`\s]+)`", cells[0]):
            names = (
                [token.replace("<svc>", service) for service in GRPC_SERVICES]
                if "<svc>" in token
                else [token]
            )
            for name in names:
                labels[name] = words
    return labels


def catalogued(name: str, catalog: set[str]) -> bool:
    """Whether ``name`` is in the catalog, a histogram's series counting as its name."""
    if name in catalog:
        return True
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name.removesuffix(suffix) in catalog:
            return True
    return False


def is_gpu_metric(name: str) -> bool:
    """Whether ``name`` only exists on machines with a GPU (or with DCGM, in Kubernetes)."""
    return name.startswith(GPU_METRIC_PREFIXES)
