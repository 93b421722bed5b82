"""Saved views of the MLflow UI: a study's experiment opens on its runs, not on GenAI traces.

MLflow 3's UI opens every experiment in its GenAI workflow unless the address says
`workflowType=machine_learning`, and it keeps the runs table's columns and grouping in the
browser, not on the server. What a project can set is a *saved view*: an experiment tag
`mlflow.sharedViewState.<key>` holding the table's state as JSON, opened by the address
`#/experiments/<id>/runs?viewStateShareKey=<key>` and listed in the page's "Views" menu.
The layout of that JSON is MLflow's (read from its 3.17 UI); `tests/integration/test_mlflow_ui.py`
opens these views in Chromium, so a release that changes it fails that test.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

VIEW_TAG_PREFIX = "mlflow.sharedViewState."
MLFLOW_UI_DEFAULT = "http://127.0.0.1:5000"  # where `mlflow ui` serves when given no --host/--port


def _column(group: str, key: str) -> str:
    """The runs table's id of a column (MLflow: group then the key in backticks)."""
    return f"{group}.`{key}`"


RUN_COLUMNS = (
    _column("tags", "algorithm"), _column("tags", "problem"), _column("tags", "seed"), _column("tags", "fidelity"),
    _column("metrics", "final_cumulative_regret"), _column("metrics", "wall_time_s"),
)
AGGREGATE_COLUMNS = (
    _column("tags", "algorithm"), _column("tags", "problem"), _column("tags", "fidelity"),
    _column("metrics", "final_cumulative_regret_mean"), _column("metrics", "final_cumulative_regret_se"),
    _column("metrics", "average_rank"),
)


@dataclass(frozen=True)
class View:
    """One saved view: which runs, grouped how, which columns, table or charts."""

    key: str  # the address's viewStateShareKey
    name: str  # as the "Views" menu lists it
    search: str  # an MLflow search filter
    columns: tuple[str, ...]
    group_by_tag: str | None = None  # rows grouped (and expanded) by this tag's value
    charts: str | None = None  # open on the chart view, showing the metrics whose names contain this

    def state(self) -> dict[str, Any]:
        state: dict[str, Any] = {"searchFilter": self.search, "selectedColumns": list(self.columns)}
        if self.charts:
            state["chartsSearchFilter"] = self.charts
        if self.group_by_tag:
            state["groupBy"] = {"aggregateFunction": "average",
                                "groupByKeys": [{"mode": "tag", "groupByData": self.group_by_tag}]}
        return state

    def tag(self) -> tuple[str, str]:
        """The experiment tag that holds this view."""
        now = int(time.time() * 1000)
        envelope = {"name": self.name, "createdAt": now, "updatedAt": now, "state": json.dumps(self.state())}
        return VIEW_TAG_PREFIX + self.key, json.dumps(envelope)

    def address(self, ui: str, experiment_id: str) -> str:
        query = f"viewStateShareKey={quote(self.key)}&workflowType=machine_learning"
        if self.charts:
            query += "&compareRunsMode=CHART"
        return f"{ui.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def study_view(study: str) -> View:
    """The study's runs: the parent run and its children in one expanded group, final regret shown."""
    return View(key="runs", name=f"{study}: runs", search="tags.role != 'aggregate'",
                columns=RUN_COLUMNS, group_by_tag="study")


def comparison_view(fidelity: str, problem: str) -> View:
    """The algorithms on one problem: their aggregate runs (mean across seeds), curves overlaid."""
    return View(key=f"compare-{fidelity}-{problem}", name=f"compare on {problem} ({fidelity})",
                search=f"tags.role = 'aggregate' and tags.problem = '{problem}' and tags.fidelity = '{fidelity}'",
                columns=AGGREGATE_COLUMNS, charts="cumulative_regret_mean")


def ui_address(tracking_uri: str) -> str:
    """Where a user opens the UI: the server itself for an http(s) store, else `mlflow ui`'s default."""
    if tracking_uri.startswith(("http://", "https://")):
        return tracking_uri.rstrip("/")
    return MLFLOW_UI_DEFAULT


def serve_command(tracking_uri: str) -> str:
    """The command that serves the UI for a store with no server of its own ('' for a server)."""
    if tracking_uri.startswith(("http://", "https://")):
        return ""
    return f"mlflow ui --backend-store-uri {tracking_uri}"


def ui_lines(addresses: dict[str, str], tracking_uri: str) -> list[str]:
    """`MLflow UI[, label]: address` per view, after the command that starts the UI if one is needed."""
    command = serve_command(tracking_uri)
    lines = [f"MLflow UI: start it with `{command}`, then open:"] if command else []
    return lines + [f"MLflow UI{', ' + label if label else ''}: {address}" for label, address in addresses.items()]
