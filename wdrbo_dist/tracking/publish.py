"""Publishing what analysis computed to MLflow: the dashboard on the parent run, one aggregate run per cell.

Aggregate runs of an earlier report are deleted first, so re-running the report leaves one
aggregate per cell; one saved view of the MLflow UI per problem overlays its algorithms.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from wdrbo_dist import __version__
from wdrbo_dist.tracking.views import comparison_view, study_view, ui_address
from wdrbo_dist.tracking.connection import (
    BATCH, FAILED, FINISHED, POSTGRES, TrackingError, apply_client_settings, check_tracking_uri, chunks,
    find_parent_run, mlflow_client, save_view, search_all, server_answers,
)

AGGREGATE_ROLE = "aggregate"


class AggregateCell(Protocol):
    """What analysis computed for one problem x algorithm cell: all that its aggregate run holds."""

    problem: str
    algorithm: str
    fidelity: str
    expected: int
    finished_seeds: list[int]
    metric_column: str
    metric_description: str
    include_initial: bool
    curves: dict[str, list[tuple[int, float]]]
    summary: dict[str, float]


class MlflowUnavailable(RuntimeError):
    """The study has no MLflow experiment or parent run to attach the report to."""


class MlflowDown(RuntimeError):
    """The tracking server does not answer; one line naming it."""


def log_report(uri: str, study_name: str, dashboard: Path, cells: Iterable[AggregateCell]) -> dict[str, Any]:
    """Attach the dashboard folder to the parent run and (re)write one aggregate run per cell.

    Aggregate runs of an earlier report are deleted first, so re-running the report leaves one
    aggregate per cell, and saves one MLflow UI view per problem that overlays its algorithms.
    Returns the ids and the views' addresses for the caller to print.
    """
    from mlflow.entities import Metric, Param

    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        # Opening a missing sqlite store would create an empty one, for nothing.
        raise MlflowUnavailable(f"no MLflow database at {uri[len('sqlite:///'):]}")
    # As `run` does: one probe first, then MLflow's HTTP retries cut to seconds (not 4 minutes).
    apply_client_settings()
    if uri.startswith(("http://", "https://")) and not server_answers(uri, timeout_s=5.0):
        raise MlflowDown(f"no MLflow server answers at {uri}")
    if uri.startswith(POSTGRES):
        try:  # in seconds, not after the minutes MLflow's engine spends retrying a connection
            check_tracking_uri(uri)
        except TrackingError as exc:
            raise MlflowDown(str(exc)) from None
    client = mlflow_client(uri)
    experiment = client.get_experiment_by_name(study_name)
    if experiment is None or experiment.lifecycle_stage != "active":
        raise MlflowUnavailable(f"no MLflow experiment named {study_name!r}: run the study with tracking first")
    experiment_id = experiment.experiment_id
    parent_id = find_parent_run(client, experiment_id)
    if parent_id is None:
        raise MlflowUnavailable(f"experiment {study_name!r} has no study parent run (tag role=study)")
    client.log_artifacts(parent_id, str(dashboard), artifact_path="dashboard")
    client.set_tag(parent_id, "dashboard", "dashboard/index.html")
    for old in search_all(client, experiment_id, f"tags.role = '{AGGREGATE_ROLE}'"):
        client.delete_run(old.info.run_id)
    now = int(time.time() * 1000)
    created: list[str] = []
    comparisons: dict[str, str] = {}
    for cell in cells:
        name = f"agg|{cell.problem}|{cell.algorithm}"
        n_finished = len(cell.finished_seeds)
        run = client.create_run(experiment_id, run_name=name, tags={
            "role": AGGREGATE_ROLE, "study": study_name, "problem": cell.problem, "algorithm": cell.algorithm,
            "fidelity": cell.fidelity, "study_parent_run_id": parent_id, "metric": cell.metric_description,
            "cell_status": "complete" if n_finished == cell.expected else ("no runs" if n_finished == 0 else "partial"),
            "mlflow.runName": name, "version": __version__,
        })
        run_id = run.info.run_id
        metrics = [Metric(key, value, now, step) for key, points in cell.curves.items() for step, value in points]
        metrics += [Metric(key, value, now, 0) for key, value in cell.summary.items()]
        seeds = ",".join(map(str, cell.finished_seeds))
        params = [Param("problem", cell.problem), Param("algorithm", cell.algorithm), Param("fidelity", cell.fidelity),
                  Param("seeds_finished", seeds[:6000] or "none"), Param("metric_column", cell.metric_column),
                  Param("include_initial", str(cell.include_initial))]
        client.log_batch(run_id, params=params)
        for chunk in chunks(metrics, BATCH):
            client.log_batch(run_id, metrics=chunk)
        client.set_terminated(run_id, status=FINISHED if n_finished else FAILED)
        created.append(run_id)
        view = comparison_view(cell.fidelity, cell.problem)
        if view.name not in comparisons:
            save_view(client, experiment_id, view)
            comparisons[view.name] = view.address(ui_address(uri), experiment_id)
    return {"experiment_id": experiment_id, "parent_run_id": parent_id, "aggregate_run_ids": created,
            "runs_view": study_view(study_name).address(ui_address(uri), experiment_id),
            "comparison_views": comparisons}
