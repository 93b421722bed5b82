"""`report` against a real sqlite MLflow store: artifacts on the parent run, aggregate runs."""

from __future__ import annotations

import math

import pytest
from mlflow.tracking import MlflowClient

from tests.analysis.fakes import fill_store
from tests.analysis.test_cli import regret_of, write_config
from wdrbo_dist.cli import main
from wdrbo_dist.study.config import load_study_config
from wdrbo_dist.tracking.study_tracker import StudyTracker


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    """One sqlite store for the module, its schema created here (the slow part, seconds), so that
    each test finds the store a study's first `run` leaves, whichever runs first."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).search_experiments()
    return uri


@pytest.mark.integration
def test_report_logs_dashboard_and_aggregates(uri, tmp_path, capsys):
    config = write_config(tmp_path, name="mlstudy", tracking=uri)
    study = load_study_config(config, validate_runs=False)
    fill_store(study, regret_of)
    # The parent run exactly as the study runner makes it.
    tracker = StudyTracker(study.tracking_uri, study.name)
    tracker.start(study, config.read_text())
    tracker.end("FINISHED", {})
    dash = tmp_path / "dash"

    assert main(["report", str(config), "--dashboards", str(dash)]) == 0
    out = capsys.readouterr().out
    assert f"parent run {tracker.parent_run_id}" in out and "4 aggregate runs" in out

    client = MlflowClient(tracking_uri=study.tracking_uri)
    names = {a.path for a in client.list_artifacts(tracker.parent_run_id, "dashboard")}
    assert {"dashboard/index.html", "dashboard/summary.md", "dashboard/tables", "dashboard/figures"} <= names
    tables = {a.path for a in client.list_artifacts(tracker.parent_run_id, "dashboard/tables")}
    assert "dashboard/tables/wilcoxon.csv" in tables
    assert {"dashboard/tables/critical_difference.csv", "dashboard/tables/probability_of_improvement.csv",
            "dashboard/tables/normalised_score_summary.csv"} <= tables
    figures = {a.path for a in client.list_artifacts(tracker.parent_run_id, "dashboard/figures")}
    assert {"dashboard/figures/fig3_instantaneous_regret_paper.json",
            "dashboard/figures/probability_of_improvement_paper.json"} <= figures

    def aggregates():
        found = client.search_runs([tracker.experiment_id], filter_string="tags.role = 'aggregate'")
        return {r.data.tags["mlflow.runName"]: r for r in found}

    runs = aggregates()
    assert set(runs) == {"agg|ackley|wdrbo", "agg|ackley|erbo", "agg|newsvendor|wdrbo", "agg|newsvendor|erbo"}
    ackley = runs["agg|ackley|wdrbo"]
    assert ackley.data.tags["cell_status"] == "complete" and ackley.info.status == "FINISHED"
    # r_t = 0.1 + 0.01 k for seeds k = 0, 1, 2: R_t has mean 0.11 t and SE 0.01 t / sqrt(3)
    history = {m.step: m.value for m in client.get_metric_history(ackley.info.run_id, "cumulative_regret_mean")}
    assert sorted(history) == list(range(1, 7))
    for t, value in history.items():
        assert value == pytest.approx(0.11 * t)
    se = {m.step: m.value for m in client.get_metric_history(ackley.info.run_id, "cumulative_regret_se")}
    assert se[6] == pytest.approx(0.06 / math.sqrt(3))
    assert ackley.data.metrics["final_cumulative_regret_mean"] == pytest.approx(0.66)
    assert ackley.data.metrics["average_rank"] == 1.0
    partial = runs["agg|newsvendor|erbo"]
    assert partial.data.tags["cell_status"] == "partial"
    assert partial.data.metrics["n_failed"] == 1 and partial.data.metrics["n_missing"] == 1
    assert client.get_metric_history(partial.info.run_id, "cumulative_regret_se") == []  # one seed: no SE

    # Reporting again replaces the aggregates instead of piling them up.
    assert main(["report", str(config), "--dashboards", str(dash)]) == 0
    again = aggregates()
    assert set(again) == set(runs)
    assert {r.info.run_id for r in again.values()}.isdisjoint(r.info.run_id for r in runs.values())


@pytest.mark.integration
def test_report_without_a_parent_run_says_so(uri, tmp_path, capsys):
    config = write_config(tmp_path, name="neverrun", tracking=uri)
    fill_store(load_study_config(config, validate_runs=False), regret_of)
    assert main(["report", str(config), "--dashboards", str(tmp_path / "dash")]) == 0
    captured = capsys.readouterr()
    assert "no MLflow experiment named 'neverrun'" in captured.err
    assert (tmp_path / "dash" / "neverrun" / "index.html").is_file()


def test_report_with_a_missing_sqlite_file_creates_nothing(tmp_path, capsys):
    db = tmp_path / "absent" / "mlflow.db"
    config = write_config(tmp_path, name="nodb", tracking=f"sqlite:///{db}")
    fill_store(load_study_config(config, validate_runs=False), regret_of)
    assert main(["report", str(config), "--dashboards", str(tmp_path / "dash")]) == 0
    assert "no MLflow database at" in capsys.readouterr().err
    assert not db.exists()
