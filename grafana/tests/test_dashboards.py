"""The dashboards, checked without Grafana or Prometheus: what provisioning needs, every query
parsed by promtool, every metric name in the catalog (grafana/METRICS.md).

The live test (every query against a Prometheus scraping the running stack) uses the same
reading of the dashboards: ``grafana.tests.dashboards.panel_queries``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from grafana.tests.dashboards import (
    CATALOG,
    DASHBOARDS,
    DASHBOARDS_DIR,
    DATASOURCE,
    GPU_ONLY_PANELS,
    GRAFANA_DIR,
    RECORDING_RULES,
    Dashboard,
    all_values,
    catalog_labels,
    catalog_names,
    catalogued,
    is_gpu_metric,
    iter_panels,
    iter_rows,
    load_dashboards,
    metric_names,
    panel_queries,
    substitute,
    variable_queries,
)
from inferline_testing.prometheus import tool

PROVISIONING = GRAFANA_DIR / "provisioning"
# Where the dashboard provider reads the JSON: `make grafana` and Kubernetes mount
# grafana/dashboards/ there.
DASHBOARDS_MOUNT = "/etc/grafana/dashboards/inferline"

# A description opens with the question its panel answers; a metric it names is one the
# panel's queries read (a renamed metric leaves no description naming the old one).
QUESTION = re.compile(r"(How|What|Which|Is|Are|Has|Have|Does|Do|When|Where|Why)\b[^?]*\?")
METRIC_WORD = re.compile(r"\b(?:nv|inferline|envoy|DCGM)_\w+")
UNITS = {"reqps", "ops", "s", "ms", "bytes", "Bps", "percentunit", "watt", "none"}
PANEL_TYPES = {"timeseries", "stat"}
# The variables that narrow every query, and the matcher each adds to a selector.
SCOPE = {
    "cluster": 'cluster=~"$cluster"',
    "namespace": 'namespace=~"$namespace"',
    "model": 'model=~"$model"',
}
# A metric's selector: its name and its matchers.
SELECTOR = re.compile(r"(?<![\w:])([A-Za-z_:][\w:]*)\{([^{}]*)\}")

ALL = load_dashboards()
PANELS = [(uid, panel) for uid, dashboard in ALL.items() for panel in iter_panels(dashboard)]
PANEL_IDS = [f"{uid}: {panel.get('title')}" for uid, panel in PANELS]


def test_the_three_dashboards_with_stable_uids() -> None:
    assert set(ALL) == set(DASHBOARDS)
    for uid, filename in DASHBOARDS.items():
        assert load_dashboards(DASHBOARDS_DIR)[uid] == ALL[uid]
        assert (DASHBOARDS_DIR / filename).is_file()
        assert ALL[uid]["uid"] == uid
        assert len(uid) <= 40  # Grafana's limit


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_what_provisioning_needs(uid: str) -> None:
    dashboard = ALL[uid]
    assert isinstance(dashboard["title"], str)
    assert dashboard["title"].startswith("inferline / ")
    assert dashboard["schemaVersion"] == 39
    assert "inferline" in dashboard["tags"]
    assert dashboard.get("id") is None  # provisioning assigns it
    assert dashboard["panels"]
    titles = [d["title"] for d in ALL.values()]
    assert len(titles) == len(set(titles))


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_the_datasource_variable(uid: str) -> None:
    variables = ALL[uid]["templating"]["list"]
    (datasource,) = [v for v in variables if v["name"] == "datasource"]
    assert datasource["type"] == "datasource"
    assert datasource["query"] == "prometheus"
    # The provisioned datasource (provisioning/datasources/prometheus.yml) is the default.
    assert datasource["current"]["value"] == "prometheus"


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_the_cluster_namespace_and_model_variables(uid: str) -> None:
    variables = {v["name"]: v for v in ALL[uid]["templating"]["list"]}
    assert list(variables) == ["datasource", *SCOPE]  # each query reads those before it
    for name in SCOPE:
        variable = variables[name]
        assert variable["type"] == "query"
        assert variable["datasource"] == DATASOURCE
        assert variable["multi"] is True
        assert variable["includeAll"] is True
        # "All" is .*, which matches a missing label too: the local stack's series have no
        # namespace or cluster.
        assert variable["allValue"] == ".*"
        assert variable["current"]["value"] == ["$__all"]
    listed = {query.variable: query.label for query in variable_queries() if query.dashboard == uid}
    assert listed == {name: name for name in SCOPE}


@pytest.mark.parametrize(("uid", "panel"), PANELS, ids=PANEL_IDS)
def test_every_selector_is_narrowed_by_the_variables(uid: str, panel: dict[str, Any]) -> None:
    """cluster and namespace on every selector, model on every metric labelled by model
    (METRICS.md; Triton's nv_inference_* are per model); no cluster on a metric whose own
    `cluster` label is something else (eds's: the hop)."""
    labels = catalog_labels()
    for target in panel["targets"]:
        expr = target["expr"]
        for name, matchers in SELECTOR.findall(expr):
            own = labels.get(name) or labels.get(base_name(name, labels), set())
            expected = {"namespace"}
            if "cluster" not in own:
                expected.add("cluster")
            if name.startswith("nv_inference_") or "model" in own:
                expected.add("model")
            found = {label for label, matcher in SCOPE.items() if matcher in matchers}
            assert found == expected, f"{name}{{{matchers}}}"
        unscoped = metric_names(SELECTOR.sub(" ", expr))
        assert not unscoped, f"selectors without the variables: {unscoped} in {expr}"


def base_name(name: str, catalog: dict[str, set[str]]) -> str:
    for suffix in ("_bucket", "_sum", "_count"):
        if name.endswith(suffix) and name.removesuffix(suffix) in catalog:
            return name.removesuffix(suffix)
    return name


def test_the_catalog_gives_labels() -> None:
    labels = catalog_labels(CATALOG)
    assert "model" in labels["inferline_batcher_queue_delay_seconds"]
    assert "model" in labels["inferline_middleman_grpc_requests_total"]
    assert "model" not in labels["inferline_batcher_queue_capacity_requests"]
    assert "cluster" in labels["inferline_eds_endpoints"]


@pytest.mark.parametrize("uid", sorted(DASHBOARDS))
def test_panel_ids_and_titles_are_unique_and_every_panel_is_placed(uid: str) -> None:
    dashboard = ALL[uid]
    everything = list(iter_rows(dashboard)) + list(iter_panels(dashboard))
    ids = [panel["id"] for panel in everything]
    assert all(isinstance(i, int) for i in ids)
    assert len(ids) == len(set(ids))
    titles = [panel["title"] for panel in iter_panels(dashboard)]
    assert len(titles) == len(set(titles)), "the live test names panels by title"
    for panel in everything:
        pos = panel["gridPos"]
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] + pos["w"] <= 24
    assert_no_overlap(dashboard)


def assert_no_overlap(dashboard: Dashboard) -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in list(iter_rows(dashboard)) + list(iter_panels(dashboard)):
        pos = panel["gridPos"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]


def test_no_two_panels_share_a_description() -> None:
    descriptions = [panel.get("description") for _, panel in PANELS]
    assert len(descriptions) == len(set(descriptions))


@pytest.mark.parametrize(("uid", "panel"), PANELS, ids=PANEL_IDS)
def test_every_panel(uid: str, panel: dict[str, Any]) -> None:
    assert panel["type"] in PANEL_TYPES
    assert panel["datasource"] == DATASOURCE
    description = panel.get("description", "")
    question = QUESTION.match(description)
    assert question and ". " not in question[0], "open with the question the panel answers"
    read = {name for target in panel["targets"] for name in metric_names(target["expr"])}
    for named in METRIC_WORD.findall(description):
        assert any(name.startswith(named) for name in read), f"names {named}, reads {read}"
    unit = panel["fieldConfig"]["defaults"]["unit"]
    assert unit in UNITS or unit.startswith("suffix:")
    targets = panel["targets"]
    assert targets
    ref_ids = [target["refId"] for target in targets]
    assert len(ref_ids) == len(set(ref_ids))
    for target in targets:
        assert target["datasource"] == DATASOURCE
        assert target["expr"].strip()
        assert "legendFormat" in target, "name the replica, stage or hop a line is"


@pytest.mark.parametrize(("uid", "panel"), PANELS, ids=PANEL_IDS)
def test_rates_use_the_rate_interval(uid: str, panel: dict[str, Any]) -> None:
    for target in panel["targets"]:
        windows = re.findall(r"\[([^\]]*)\]", target["expr"])
        assert all(window == "$__rate_interval" for window in windows), target["expr"]
        substituted = substitute(target["expr"], variables=all_values(ALL[uid]))
        assert "$" not in substituted, "only $__rate_interval and the variables are substituted"


def test_every_metric_is_in_the_catalog() -> None:
    catalog = catalog_names()
    recorded = recording_rule_names()
    missing: dict[str, set[str]] = {}
    for query in panel_queries():
        for name in metric_names(query.expr):
            # A name with a colon is a recording rule: grafana/rules/recording.yml must have it.
            ok = name in recorded if ":" in name else catalogued(name, catalog)
            if not ok:
                missing.setdefault(name, set()).add(f"{query.dashboard}: {query.panel}")
    assert not missing, f"not in grafana/METRICS.md (or recording.yml): {missing}"


def recording_rule_names() -> set[str]:
    if not RECORDING_RULES.is_file():
        return set()
    rules = yaml.safe_load(RECORDING_RULES.read_text(encoding="utf-8")) or {}
    return {
        str(rule["record"])
        for group in rules.get("groups", [])
        for rule in group.get("rules", [])
        if "record" in rule
    }


def test_gpu_only_panels_are_exactly_those_using_gpu_metrics() -> None:
    using_gpu = {
        (query.dashboard, query.panel)
        for query in panel_queries()
        if any(is_gpu_metric(name) for name in metric_names(query.expr))
    }
    assert using_gpu == GPU_ONLY_PANELS
    for uid, panel in PANELS:
        if (uid, panel["title"]) in GPU_ONLY_PANELS:
            description = panel["description"]
            assert "Needs a GPU" in description or "Kubernetes only" in description


def test_every_query_parses(tmp_path: Path) -> None:
    """``promtool check rules`` over a rules file holding every query as a recording rule."""
    promtool = tool()
    queries = [query.expr for query in panel_queries(rate_interval="1m")]
    queries += [query.expr for query in variable_queries()]  # the variables' label_values
    rules = {
        "groups": [
            {
                "name": "dashboards",
                "rules": [
                    {"record": f"dashboard:query_{i}:check", "expr": expr}
                    for i, expr in enumerate(queries)
                ],
            }
        ]
    }
    path = tmp_path / "dashboards.rules.yml"
    path.write_text(yaml.safe_dump(rules, sort_keys=False), encoding="utf-8")
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(queries)} rules found" in result.stdout


def test_metric_names_reads_promql() -> None:
    expr = (
        "sum by (replica) (nv_gpu_memory_used_bytes) * on (replica) group_right () "
        "group by (replica, model) (nv_inference_count) / 1e6 + histogram_quantile(0.99, "
        'sum by (le) (rate(x_bucket{a="b", c=~"d|e"}[$__rate_interval]))) or vector(0) '
        "and clamp_min(inferline:thing:rate1m, 0)"
    )
    assert metric_names(expr) == {
        "nv_gpu_memory_used_bytes",
        "nv_inference_count",
        "x_bucket",
        "inferline:thing:rate1m",
    }
    with pytest.raises(ValueError, match="__name__"):
        metric_names('{__name__=~"inferline_.+"}')


def test_the_datasource_provisioning() -> None:
    config = yaml.safe_load(
        (PROVISIONING / "datasources" / "prometheus.yml").read_text(encoding="utf-8")
    )
    assert config["apiVersion"] == 1
    (datasource,) = config["datasources"]
    assert datasource["uid"] == "prometheus"
    assert datasource["type"] == "prometheus"
    assert datasource["url"] == "${PROMETHEUS_URL}"
    # Grafana's $__rate_interval assumes this scrape interval (grafana/prometheus/prometheus.yml).
    assert datasource["jsonData"]["timeInterval"] == scrape_interval()


def scrape_interval() -> str:
    path = GRAFANA_DIR / "prometheus" / "prometheus.yml"
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    return str(config["global"]["scrape_interval"])


def test_the_dashboard_provisioning() -> None:
    config = yaml.safe_load(
        (PROVISIONING / "dashboards" / "inferline.yml").read_text(encoding="utf-8")
    )
    assert config["apiVersion"] == 1
    (provider,) = config["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == DASHBOARDS_MOUNT


def test_the_readme_says_what_every_panel_answers() -> None:
    readme = (GRAFANA_DIR / "README.md").read_text(encoding="utf-8")
    missing = [
        f"{uid}: {panel['title']}"
        for uid, panel in PANELS
        if f"- **{panel['title']}** — " not in readme
    ]
    assert not missing, f"grafana/README.md does not describe {missing}"
