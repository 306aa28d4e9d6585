"""What every inferline dashboard shares: tags, links to the others, time range, refresh, the
variables, and rows of panels numbered in order.
"""

from __future__ import annotations

from collections.abc import Sequence

from grafana_foundation_sdk.builders import dashboard
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.models.dashboard import (
    Dashboard,
    DashboardCursorSync,
    DashboardLinkType,
    DataSourceRef,
    Panel,
    RowPanel,
)

from grafana.dashboards_src import variables

# Grafana 10 and 11 read it (Grafana migrates what it reads to its own version).
SCHEMA_VERSION = 39
TAG = "inferline"

Section = tuple[str, Sequence[Builder[Panel]]]  # a row's title, and its panels in order


def inferline_dashboard(
    uid: str, title: str, description: str, sections: Sequence[Section]
) -> Dashboard:
    """The dashboard ``inferline / <title>``: each section a row and the panels under it."""
    builder = (
        dashboard.Dashboard(f"inferline / {title}")
        .uid(uid)
        .description(description)
        .tags([TAG])
        .editable()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .refresh("10s")
        .time("now-30m", "now")
        .timezone("")
        .fiscal_year_start_month(0)
        .live_now(False)
        .week_start("")
        .version(1)
        .annotation(built_in_annotations())
        .link(
            dashboard.DashboardLink("inferline dashboards")
            .type(DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(False)
            .include_vars(True)
            .keep_time(True)
            .icon("external link")
            .target_blank(False)
            .tooltip("")
            .url("")
        )
        .variables(variables.every())
    )
    for row_title, panels in sections:
        builder = builder.with_row(dashboard.Row(row_title).collapsed(False))
        for panel in panels:
            builder = builder.with_panel(panel)
    board = builder.build()
    board.schema_version = SCHEMA_VERSION
    number(board)
    return board


def built_in_annotations() -> dashboard.AnnotationQuery:
    """Grafana's own annotations and alerts, hidden (what Grafana adds to a new dashboard)."""
    return (
        dashboard.AnnotationQuery()
        .name("Annotations & Alerts")
        .datasource(DataSourceRef(type_val="grafana", uid="-- Grafana --"))
        .enable(True)
        .hide(True)
        .icon_color("rgba(0, 211, 255, 1)")
        .type("dashboard")
        .built_in(1)
    )


def number(board: Dashboard) -> None:
    """Give the rows and panels ids 1, 2, 3, … in order (a panel's link names its id)."""
    for index, panel in enumerate(board.panels or [], start=1):
        if isinstance(panel, RowPanel | Panel):
            panel.id_val = index
