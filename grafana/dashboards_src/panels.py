"""The panels in the dashboards' one style: a Prometheus query per line, a table legend with
mean, max and last, a shared tooltip; stats for the few headline numbers.

A panel is placed by its width and height alone: the dashboard flows panels left to right under
their row, starting a new line when one is full (the SDK's layout).
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, Self, TypeVar

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard, prometheus, stat, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.variants import Dataquery
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    DynamicConfigValue,
    FieldColorModeId,
    Threshold,
    ThresholdsMode,
)
from grafana_foundation_sdk.models.prometheus import QueryEditorMode

from grafana.dashboards_src.variables import DATASOURCE

LEGEND_CALCS = ["mean", "max", "lastNotNull"]
GREEN = ((None, "green"),)


@dataclass(frozen=True)
class Query:
    """One line (or one stat) of a panel."""

    legend: str  # Grafana's legendFormat: the replica, stage or hop the line is
    expr: str  # PromQL, with the dashboard's variables (grafana.dashboards_src.promql)
    stack: str | None = None  # a stacking group of its own, for a panel of several stacks


class _Panel(Protocol):
    """What every panel builder of the SDK has (each returns itself)."""

    def title(self, title: str) -> Self: ...
    def description(self, description: str) -> Self: ...
    def datasource(self, datasource: DataSourceRef) -> Self: ...
    def span(self, w: int) -> Self: ...
    def height(self, h: int) -> Self: ...
    def unit(self, unit: str) -> Self: ...


P = TypeVar("P", bound=_Panel)


def framed(panel: P, title: str, description: str, unit: str, width: int, height: int) -> P:
    """``panel`` with what every panel states: its title and question, the dashboard's
    datasource, its size and its unit."""
    return (
        panel.title(title)
        .description(description)
        .datasource(DATASOURCE)
        .span(width)
        .height(height)
        .unit(unit)
    )


def targets(queries: Sequence[Query]) -> list[Builder[Dataquery]]:
    """The panel's targets, refIds A, B, C, … in order."""
    return [
        prometheus.Dataquery()
        .ref_id(ref_id)
        .datasource(DATASOURCE)
        .editor_mode(QueryEditorMode.CODE)
        .expr(query.expr)
        .legend_format(query.legend)
        .range()
        for ref_id, query in zip(string.ascii_uppercase, queries, strict=False)
    ]


def timeseries_panel(
    title: str,
    description: str,
    unit: str,
    queries: Sequence[Query],
    *,
    width: int,
    height: int = 8,
    stacked: bool = False,
    fill: int = 10,
    steps: bool = False,
    decimals: int | None = None,
    maximum: float | None = None,
) -> timeseries.Panel:
    """Lines over time, one per series of each query; ``stacked`` stacks them (fill 30)."""
    panel = (
        framed(timeseries.Panel(), title, description, unit, width, height)
        .color_scheme(dashboard.FieldColor().mode(FieldColorModeId.PALETTE_CLASSIC))
        .draw_style(common.GraphDrawStyle.LINE)
        .line_width(1)
        .fill_opacity(30 if stacked else fill)
        .gradient_mode(common.GraphGradientMode.NONE)
        .show_points(common.VisibilityMode.NEVER)
        .span_nulls(False)
        .line_interpolation(
            common.LineInterpolation.STEP_AFTER if steps else common.LineInterpolation.LINEAR
        )
        .axis_placement(common.AxisPlacement.AUTO)
        .axis_soft_min(0)
        .stacking(
            common_builders.StackingConfig()
            .mode(common.StackingMode.NORMAL if stacked else common.StackingMode.NONE)
            .group("A")
        )
        .legend(
            common_builders.VizLegendOptions()
            .show_legend(True)
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.BOTTOM)
            .calcs(LEGEND_CALCS)
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
        .targets(targets(queries))
    )
    if decimals is not None:
        panel = panel.decimals(decimals)
    if maximum is not None:
        panel = panel.max(maximum)
    for ref_id, query in zip(string.ascii_uppercase, queries, strict=False):
        if query.stack is not None:
            stacking = {"mode": "normal", "group": query.stack}
            panel = panel.override_by_query(
                ref_id, [DynamicConfigValue(id_val="custom.stacking", value=stacking)]
            )
    return panel


def stat_panel(
    title: str,
    description: str,
    unit: str,
    query: Query,
    *,
    width: int,
    height: int = 4,
    thresholds: Sequence[tuple[float | None, str]] = GREEN,
    decimals: int | None = None,
    show: common.BigValueTextMode = common.BigValueTextMode.VALUE_AND_NAME,
) -> stat.Panel:
    """The latest value, coloured by ``thresholds`` (from value, colour), over its sparkline."""
    panel = (
        framed(stat.Panel(), title, description, unit, width, height)
        .color_scheme(dashboard.FieldColor().mode(FieldColorModeId.THRESHOLDS))
        .thresholds(
            dashboard.ThresholdsConfig()
            .mode(ThresholdsMode.ABSOLUTE)
            .steps([Threshold(value=value, color=color) for value, color in thresholds])
        )
        .reduce_options(
            common_builders.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False)
        )
        .color_mode(common.BigValueColorMode.VALUE)
        .graph_mode(common.BigValueGraphMode.AREA)
        .justify_mode(common.BigValueJustifyMode.AUTO)
        .orientation(common.VizOrientation.AUTO)
        .text_mode(show)
        .show_percent_change(False)
        .wide_layout(True)
        .targets(targets([query]))
    )
    if decimals is not None:
        panel = panel.decimals(decimals)
    return panel


def row(title: str) -> dashboard.Row:
    """A row heading the panels that follow it (expanded)."""
    return dashboard.Row(title).collapsed(False)
