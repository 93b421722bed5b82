"""MLflow tracking on a real sqlite store: study parent run, child runs, catching up, orphans."""

from __future__ import annotations

import json
import pickle
import socket
import time
from pathlib import Path

import pandas as pd

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.storage.test_store import failed, finished, spec
from wdrbo_dist.study.config import parse_study_config
from wdrbo_dist.run.spec import RunSpec
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.tracking.child_runs import STEP_METRICS, log_child_run
from wdrbo_dist.tracking.connection import TrackingError, check_tracking_uri
from wdrbo_dist.tracking import batch_rows, child_runs
from wdrbo_dist.tracking.batch_rows import StoreRows
from wdrbo_dist.tracking.study_tracker import LEDGER, StudyTracker

STUDY = {"name": "unit", "problems": ["newsvendor"], "algorithms": [{"name": "erbo", "options": {"beta": 2.0}}],
         "seeds": [1, 2, 3], "evaluations": 7, "init_size": 5, "tracking_uri": "none"}


@pytest.fixture(scope="module")
def database(tmp_path_factory) -> str:
    """One sqlite store for the module (creating it runs MLflow's migrations: seconds)."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow')}/mlflow.db"
    check_tracking_uri(uri)  # creates the database
    return uri


@pytest.fixture()
def tracked(database: str, tmp_path: Path, request):
    name = request.node.name[5:45]  # an experiment per test
    study = parse_study_config(STUDY | {"name": name, "output_dir": str(tmp_path / "out")})
    tracker = StudyTracker(database, name)
    tracker.start(study, yaml.safe_dump(STUDY), {"backend": "serial"})
    return tracker, study, ResultStore(study.output_dir), MlflowClient(database)


def children(client: MlflowClient, tracker: StudyTracker) -> list:
    return client.search_runs([tracker.experiment_id], filter_string="tags.role = 'run'")


def logged(tracker: StudyTracker, store: ResultStore, result) -> str:
    """Deliver a stored result as the driver does and write the batch; its child run's id."""
    store.save(result)
    assert tracker.deliver(result, None, store.records_path(result.spec.run_key)) == []
    assert tracker.flush() == []
    (run_id, _), = tracker.child_runs()[result.spec.run_key]
    return run_id


def test_a_finished_run_becomes_a_complete_child_run(tracked) -> None:
    tracker, study, store, client = tracked
    result = finished(spec(seed=1))
    run_id = logged(tracker, store, result)
    run = client.get_run(run_id)
    assert run.info.run_name == "newsvendor|erbo|s1" and run.info.status == "FINISHED"
    tags = run.data.tags
    assert tags["mlflow.parentRunId"] == tracker.parent_run_id
    assert {k: tags[k] for k in ("role", "run_key", "problem", "algorithm", "seed", "fidelity", "evaluations", "init_size")} == {
        "role": "run", "run_key": result.spec.run_key, "problem": "newsvendor", "algorithm": "erbo", "seed": "1",
        "fidelity": "paper", "evaluations": "7", "init_size": "5"}
    assert run.data.params["beta"] == "2.0" and run.data.params["num_restarts"]  # options, defaults included
    for key in STEP_METRICS:
        history = client.get_metric_history(run_id, key)
        assert [m.step for m in history] == list(range(1, 8))
    assert [m.value for m in client.get_metric_history(run_id, "regret")] == pytest.approx(result.records["regret"].tolist())
    assert run.data.metrics["final_cumulative_regret"] == pytest.approx(result.records["cumulative_regret"].iloc[-1])
    assert {"wall_time_s", "total_time_fit_s", "total_time_acquisition_s", "final_best_y"} <= set(run.data.metrics)
    assert client.list_artifacts(run_id) == []  # a sqlite store's child runs: the store holds the records
    parent = client.get_run(tracker.parent_run_id)
    assert parent.data.tags["role"] == "study" and parent.data.params["backend"] == "serial"
    assert [a.path for a in client.list_artifacts(tracker.parent_run_id)] == ["study.yaml"]


def test_a_batch_written_run_reads_back_as_the_client_logs_one(tracked) -> None:
    # The batch writes MLflow's tables directly: whatever MLflow's client shows of a run it
    # logged itself, it shows of a batch-written one (artifacts and times aside).
    tracker, _, store, client = tracked
    result = finished(spec(seed=2))
    by_batch = client.get_run(logged(tracker, store, result))
    by_client = client.get_run(log_child_run(client, tracker.experiment_id, tracker.parent_run_id, result))
    assert by_batch.data.params == by_client.data.params
    assert by_batch.data.metrics == by_client.data.metrics  # the latest value of each metric
    ignore = {"mlflow.user", "mlflow.source.name", "mlflow.source.type", "mlflow.source.git.commit"}
    assert ({k: v for k, v in by_batch.data.tags.items() if k not in ignore}
            == {k: v for k, v in by_client.data.tags.items() if k not in ignore})
    for key in (*STEP_METRICS, "final_cumulative_regret"):
        histories = [client.get_metric_history(r.info.run_id, key) for r in (by_batch, by_client)]
        assert [(m.step, m.value) for m in histories[0]] == [(m.step, m.value) for m in histories[1]]
    found = client.search_runs([tracker.experiment_id], "tags.role = 'run' and metrics.final_cumulative_regret > -1e300",
                               order_by=["metrics.final_cumulative_regret"])
    assert len(found) == 2 and by_batch.info.artifact_uri.endswith(f"{by_batch.info.run_id}/artifacts")
    index = tracker.child_runs()
    assert sorted(index[result.spec.run_key]) == sorted([(by_batch.info.run_id, "FINISHED"),
                                                         (by_client.info.run_id, "RUNNING")])


def test_a_logged_child_run_has_its_records_artifact_without_a_lookup_of_the_run(tracked, monkeypatch) -> None:
    # Against a server each request is the server's time: the artifact goes to the location
    # create_run returned, not to one a get_run asks for.
    tracker, _, _, client = tracked
    result = finished(spec(seed=4))

    def no_lookup(*args, **kwargs):
        raise AssertionError("get_run while logging a child run")

    monkeypatch.setattr(MlflowClient, "get_run", no_lookup)
    run_id = log_child_run(client, tracker.experiment_id, tracker.parent_run_id, result)
    monkeypatch.undo()
    local = client.download_artifacts(run_id, "records.parquet")
    assert pd.read_parquet(local)["regret"].tolist() == result.records["regret"].tolist()


def test_a_worker_probes_the_server_only_when_its_last_log_is_not_recent(monkeypatch) -> None:
    # A probe is a request per run at 10^5 runs; a worker that logged a moment ago trusts the
    # server, and one whose last log failed (or is old) asks again.
    probes, logs = [], []
    monkeypatch.setattr(child_runs, "server_answers", lambda uri: probes.append(uri) or True)
    monkeypatch.setattr(child_runs, "mlflow_client", lambda uri: None)
    monkeypatch.setattr(child_runs, "log_child_run", lambda *args: logs.append(args) or f"id{len(logs)}")
    monkeypatch.setattr(child_runs, "_logged_at", {})
    hook = child_runs.WorkerTracking("http://127.0.0.1:1", "1", "parent")
    assert [hook(finished(spec(seed=s))) for s in (1, 2, 3)] == ["id1", "id2", "id3"]
    assert len(probes) == 1
    monkeypatch.setattr(child_runs, "log_child_run", lambda *args: (_ for _ in ()).throw(ConnectionError("gone")))
    with pytest.raises(ConnectionError):
        hook(finished(spec(seed=4)))  # trusted, so not probed: it fails, and the next one probes
    assert len(probes) == 1
    monkeypatch.setattr(child_runs, "server_answers", lambda uri: probes.append(uri) and False)
    with pytest.raises(TrackingError, match="does not answer"):
        hook(finished(spec(seed=5)))
    assert len(probes) == 2
    monkeypatch.setattr(child_runs, "_logged_at", {hook.uri: time.monotonic() - child_runs.TRUST_S - 1})
    with pytest.raises(TrackingError):
        hook(finished(spec(seed=6)))  # logged, but not a moment ago
    assert len(probes) == 3


def test_rows_a_worker_builds_make_the_same_child_run_as_the_driver_would(tracked) -> None:
    # With a sqlite store the study's hook builds a finished run's rows where it ran; they
    # travel back pickled with the result, and the driver only inserts them.
    tracker, _, store, client = tracked
    hook = tracker.worker_hook()
    assert isinstance(hook, StoreRows)
    hook = pickle.loads(pickle.dumps(hook))  # as a pool process or Ray worker gets it
    assert hook(failed(spec(seed=3))) is None  # a failed run: the driver logs it the usual way
    result = finished(spec(seed=3))
    rows = pickle.loads(pickle.dumps(hook(result)))
    store.save(result)
    assert tracker.deliver(result, rows, store.records_path(result.spec.run_key)) == [] and tracker.flush() == []
    (by_worker, _), = tracker.child_runs()[result.spec.run_key]
    by_driver = client.get_run(logged(tracker, store, finished(spec(seed=1))))
    run = client.get_run(by_worker)
    assert run.info.status == "FINISHED" and run.info.run_name == "newsvendor|erbo|s3"
    assert set(run.data.metrics) == set(by_driver.data.metrics) and run.data.params == by_driver.data.params
    assert [m.value for m in client.get_metric_history(by_worker, "regret")] == result.records["regret"].tolist()
    assert run.data.tags["mlflow.parentRunId"] == tracker.parent_run_id


def test_a_store_whose_tables_differ_gets_no_rows_and_the_next_run_logs_them(tracked, monkeypatch) -> None:
    # The batch writes MLflow's tables directly, so it checks their columns first: another
    # MLflow's schema fails the write (one warning) rather than writing rows it would misread.
    tracker, _, store, client = tracked
    monkeypatch.setitem(batch_rows.COLUMNS, "tags", ("key", "value", "run_uuid", "added_later"))
    result = finished(spec(seed=2))
    store.save(result)
    assert tracker.deliver(result, None, store.records_path(result.spec.run_key)) == []
    assert tracker.flush() == ["mlflow: writing 1 runs failed (RuntimeError); the next `run` logs them"]
    assert children(client, tracker) == []


def test_params_are_the_options_as_the_algorithm_resolved_them(tracked) -> None:
    # DRBO-MMD with the published solver: the params are the given option and the profile's
    # defaults (the numerical routes are settings, not options).
    tracker, study, store, client = tracked
    result = finished(RunSpec.make(options={"mmd_solver": "scs"}, algorithm="drbo-mmd", problem="newsvendor",
                                   seed=4, evaluations=7, init_size=5, study="unit", fidelity="reference"))
    params = client.get_run(logged(tracker, store, result)).data.params
    assert params["mmd_solver"] == "SCS" and "mmd_working_set" not in params
    assert params["mmd_diagonal_grid"] == "True"  # the reference profile's default


def test_a_failed_run_carries_its_traceback(tracked) -> None:
    tracker, _, store, client = tracked
    result = failed(spec(seed=2))
    store.save(result)
    run = client.get_run(tracker.record(result, None, None))
    assert run.info.status == "FAILED" and run.data.tags["error"] == "ValueError: boom"
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["traceback.txt"]


def test_reconcile_logs_what_the_store_has_and_kills_orphans_once(tracked) -> None:
    tracker, study, store, client = tracked
    keys = [r.run_key for r in study.runs]
    # A driver died after the store had two results and before the tracker knew of them, and
    # a worker died while logging a third one (a RUNNING child run that will never end).
    for seed in (1, 2):
        store.save(finished(spec(seed=seed)))
    orphan = log_child_run(client, tracker.experiment_id, tracker.parent_run_id, finished(spec(seed=3)))
    assert tracker.reconcile(store, keys) == (2, 1)
    assert client.get_run(orphan).info.status == "KILLED"
    assert tracker.reconcile(store, keys) == (0, 0)  # idempotent
    statuses = sorted((r.data.tags["seed"], r.info.status) for r in children(client, tracker))
    assert statuses == [("1", "FINISHED"), ("2", "FINISHED"), ("3", "KILLED")]


def test_a_ledger_a_clean_command_left_spares_the_next_start_reading_mlflow_back(tracked, monkeypatch) -> None:
    # At 10^5 runs on a server, reading the child runs back is minutes of paging: the ledger
    # (what MLflow holds) stands in for it until a command is cut short.
    tracker, study, store, client = tracked
    keys = [r.run_key for r in study.runs]
    for seed in (1, 2):
        logged(tracker, store, finished(spec(seed=seed)))
    assert tracker.reconcile(store, keys, trusted=True) == (0, 0)
    tracker.save_ledger(store.root)
    ledger = store.root / LEDGER
    assert json.loads(ledger.read_text())["run_keys"] == sorted(keys[:2])

    def read_back(self):
        raise AssertionError("read the child runs back")

    again = StudyTracker(tracker.uri, tracker.study_name)
    again.start(study, "name: unit\n")
    again.load_ledger(store.root)
    assert not ledger.exists()  # until this command ends cleanly, nothing vouches for MLflow
    with monkeypatch.context() as m:
        m.setattr(StudyTracker, "child_runs", read_back)
        assert again.reconcile(store, keys, rerun=[keys[2]], trusted=True) == (0, 0)
    # Not trusted (a command cut short), a run set aside to run again, or a finished run the
    # ledger lacks: the child runs are read back.
    assert again.reconcile(store, keys, rerun=[keys[0]], trusted=True) == (0, 1)
    assert [r.info.status for r in children(client, tracker) if r.data.tags["seed"] == "1"] == ["KILLED"]
    store.save(finished(spec(seed=3)))
    assert again.reconcile(store, keys, trusted=True) == (2, 0)  # seeds 1 (killed before) and 3
    assert again.known == set(keys)


def test_a_ledger_of_another_experiment_or_store_is_ignored(tracked) -> None:
    tracker, study, store, _ = tracked
    logged(tracker, store, finished(spec(seed=1)))
    tracker.reconcile(store, [r.run_key for r in study.runs])
    for field, value in (("parent_run_id", "0" * 32), ("tracking_uri", "sqlite:///elsewhere.db")):
        tracker.save_ledger(store.root)
        text = (store.root / LEDGER).read_text()
        (store.root / LEDGER).write_text(text.replace(json.loads(text)[field], value))
        again = StudyTracker(tracker.uri, tracker.study_name)
        again.start(study, "name: unit\n")
        again.load_ledger(store.root)
        assert again.known is None and not (store.root / LEDGER).exists()
    (store.root / LEDGER).write_text("{not json")
    again.load_ledger(store.root)
    assert again.known is None


def test_a_resumed_study_reuses_its_experiment_and_parent_run(tracked) -> None:
    tracker, study, _, client = tracked
    tracker.end("FINISHED", {"runs_finished_total": 0.0})
    again = StudyTracker(tracker.uri, tracker.study_name)
    again.start(study, "name: unit\n")
    assert (again.experiment_id, again.parent_run_id) == (tracker.experiment_id, tracker.parent_run_id)
    assert client.get_run(again.parent_run_id).info.status == "RUNNING"
    assert len(client.search_runs([tracker.experiment_id], filter_string="tags.role = 'study'")) == 1


def test_unreachable_or_unusable_stores_fail_fast_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    with pytest.raises(TrackingError, match=rf"^tracking_uri http://127.0.0.1:{port}: no MLflow server answers"):
        check_tracking_uri(f"http://127.0.0.1:{port}", timeout_s=2)
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(TrackingError, match="cannot create folder"):
        check_tracking_uri(f"sqlite:///{tmp_path}/file/sub/mlflow.db")


def test_the_study_experiment_is_tagged_as_model_training_for_mlflow_3(tracked) -> None:
    tracker, _, _, client = tracked
    assert client.get_experiment(tracker.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"


def test_while_mlflow_is_away_the_backlog_holds_keys_and_logs_from_the_store(tracked, monkeypatch) -> None:
    """Memory stays bounded however long the store is away: the backlog keeps run keys, and the
    results are read back from the store once MLflow answers again."""
    tracker, study, store, client = tracked
    tracker.store = store
    down = {"now": True}

    def write(*args, **kwargs):
        if down["now"]:
            raise ConnectionError("mlflow is away")
        return real_write(*args, **kwargs)

    real_write = tracker.batch.write
    monkeypatch.setattr(tracker.batch, "write", write)
    monkeypatch.setattr(batch_rows, "BATCH_RUNS", 1, raising=False)
    monkeypatch.setattr("wdrbo_dist.tracking.study_tracker.BATCH_RUNS", 1)
    results = [finished(s) for s in study.runs]
    for result in results:
        store.save(result)
        tracker.deliver(result, None, store.records_path(result.spec.run_key))
    assert tracker.unreachable and tracker.backlog
    assert all(isinstance(kept, str) for kept, _, _ in tracker.backlog)  # keys, not results
    down["now"] = False
    assert tracker.flush()[-1].startswith("mlflow answers again")
    assert sorted(tracker.child_runs()) == sorted(r.spec.run_key for r in results)
