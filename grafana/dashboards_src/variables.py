"""The variables every dashboard has: its Prometheus, and the cluster, namespace and model.

``datasource`` is a Prometheus datasource, by default the provisioned one (uid ``prometheus``,
grafana/provisioning/datasources/prometheus.yml). ``cluster``, ``namespace`` and ``model`` are
Prometheus label values, each multi-valued with "All" (``.*``, which matches a missing label
too: the local stack's series have no ``namespace`` or ``cluster``), each narrowed by the ones
before it.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    VariableModel,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

# What every panel and target names as its data source: the dashboard's `datasource` variable.
DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
ALL_VALUE = ".*"
# The jobs that scrape inferline's processes (grafana/prometheus/prometheus.yml, and the same in
# Kubernetes: components/monitoring and components/monitoring-operator).
JOBS = 'job=~"inferline|triton|envoy"'
# The metrics the `model` variable lists values of: the public models middleman serves, and the
# models the batcher batches and Triton runs.
MODEL_METRICS = (
    "inferline_middleman_images_total",
    "inferline_batcher_batch_size_items_count",
    "nv_inference_count",
)


def datasource() -> dashboard.DatasourceVariable:
    return (
        dashboard.DatasourceVariable("datasource")
        .label("Prometheus")
        .type("prometheus")
        .current(VariableOption(selected=False, text="Prometheus", value="prometheus"))
    )


def label_values(name: str, label: str, query: str) -> dashboard.QueryVariable:
    """A multi-valued variable of ``label``'s values in ``query`` (Grafana's label_values),
    "All" by default."""
    return (
        dashboard.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(ALL_VALUE)
        .current(VariableOption(selected=True, text=["All"], value=["$__all"]))
    )


def cluster() -> dashboard.QueryVariable:
    return label_values("cluster", "Cluster", f"label_values(up{{{JOBS}}}, cluster)")


def namespace() -> dashboard.QueryVariable:
    query = f'label_values(up{{{JOBS}, cluster=~"$cluster"}}, namespace)'
    return label_values("namespace", "Namespace", query)


def model() -> dashboard.QueryVariable:
    names = "|".join(MODEL_METRICS)
    scope = 'cluster=~"$cluster", namespace=~"$namespace"'
    query = f'label_values({{__name__=~"{names}", {scope}}}, model)'
    return label_values("model", "Model", query).description(
        "middleman's series carry the public model (e.g. classifier), the batcher's and "
        "Triton's the model Triton runs (e.g. efficientnet_lite0): choose both, or All."
    )


def every() -> list[Builder[VariableModel]]:
    """The variables, in order: each one's query reads those before it."""
    return [datasource(), cluster(), namespace(), model()]
