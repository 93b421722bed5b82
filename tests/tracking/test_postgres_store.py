"""A PostgreSQL tracking store: what a study logs there, read back with MLflow's client, is what
it logs into sqlite; resuming adds no child run twice; two drivers share one database at once; a
database that cannot be used stops the command before any run, in one line; the password stays
in the environment. On a real server (the session's `postgres` fixture, tests/support/postgres.py).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.support.local_servers import free_port, start_mlflow_server, stop, wait_for
from tests.storage.test_store import finished, spec
from tests.support.postgres import Postgres
from wdrbo_dist.cli import main
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.study.config import parse_study_config
from wdrbo_dist.tracking.connection import check_tracking_uri
from wdrbo_dist.tracking.study_tracker import LEDGER, StudyTracker


def study_data(folder: Path, name: str, uri: str, **changes) -> dict:
    """A small study: two cheap runs on the local backend (each worker builds its run's rows)."""
    return {"name": name, "problems": ["newsvendor"], "algorithms": [{"name": "random"}], "seeds": [1, 2],
            "evaluations": 7, "init_size": 5, "backend": "local", "workers": 2,
            "tracking_uri": uri, "output_dir": str(folder / name)} | changes


def run(folder: Path, data: dict, *extra: str) -> int:
    folder.mkdir(exist_ok=True)
    config = folder / f"{data['name']}.yaml"
    config.write_text(yaml.safe_dump(data))
    return main(["run", str(config), "--quiet", *extra])


def child_runs(client: MlflowClient, study: str) -> list:
    experiment = client.get_experiment_by_name(study)
    return client.search_runs([experiment.experiment_id], "tags.role = 'run'", max_results=1000)


def timing(key: str) -> bool:
    return "time" in key or key.endswith("_s")


def snapshot(uri: str, study: str) -> dict:
    """What MLflow's client shows of a study, less what differs between two runs of it (ids,
    clock times, durations)."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(study)
    tags = {}
    for key, value in experiment.tags.items():
        view = json.loads(value) if key.startswith("mlflow.") and value.startswith("{") else None
        tags[key] = {k: v for k, v in view.items() if not k.endswith("At")} if isinstance(view, dict) else value
    runs = {}
    for found in client.search_runs([experiment.experiment_id], max_results=1000):
        run_id = found.info.run_id
        histories = {key: [(m.step, m.value) for m in client.get_metric_history(run_id, key)]
                     for key in found.data.metrics if not timing(key)}
        runs[found.info.run_name] = {
            "status": found.info.status, "params": found.data.params,
            "tags": {k: v for k, v in found.data.tags.items() if k not in ("mlflow.parentRunId", "mlflow.source.name")},
            "metric keys": sorted(found.data.metrics), "histories": histories,
            "parent": client.get_run(found.data.tags["mlflow.parentRunId"]).info.run_name
            if "mlflow.parentRunId" in found.data.tags else None}
    return {"experiment tags": tags, "runs": runs}


@pytest.fixture()
def pg_env(postgres: Postgres, monkeypatch) -> Postgres:
    """The driver's environment holds the credentials, as a user's would."""
    for name, value in postgres.env.items():
        monkeypatch.setenv(name, value)
    return postgres


@pytest.fixture()
def folder():
    """Not pytest's tmp_path: the password test reads every file a run wrote, and only those."""
    path = Path(tempfile.mkdtemp(prefix="wdrpgt"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def assert_no_password(password: str, folder: Path, *texts: str) -> None:
    for text in texts:
        assert password not in text
    for path in folder.rglob("*"):
        if path.is_file():
            assert password.encode() not in path.read_bytes(), path


def test_a_study_logs_into_postgresql_what_it_logs_into_sqlite(pg_env: Postgres, folder: Path, capsys) -> None:
    uri = pg_env.create_database("same")
    assert run(folder, study_data(folder, "same", uri)) == 0
    out = capsys.readouterr()
    sqlite = f"sqlite:///{folder}/sqlite/mlflow.db"
    assert run(folder / "sqlite", study_data(folder / "sqlite", "same", sqlite, backend="serial")) == 0
    in_postgres, in_sqlite = snapshot(uri, "same"), snapshot(sqlite, "same")
    assert in_postgres["runs"]["study same"]["params"].pop("backend") == "local"
    assert in_sqlite["runs"]["study same"]["params"].pop("backend") == "serial"
    assert sorted(in_postgres["runs"]) == ["newsvendor|random|s1", "newsvendor|random|s2", "study same"]
    assert in_postgres["runs"]["newsvendor|random|s1"]["histories"]["regret"]  # per-step metrics
    assert in_postgres["runs"]["newsvendor|random|s1"]["parent"] == "study same"
    assert in_postgres == in_sqlite
    assert_no_password(pg_env.password, folder, out.out, out.err)


def test_a_resumed_study_adds_no_child_run_twice(pg_env: Postgres, folder: Path) -> None:
    uri = pg_env.create_database("resume")
    data = study_data(folder, "resume", uri, seeds=[1], backend="serial")
    assert run(folder, data) == 0
    # Without the ledger the driver reads the child runs back from the database to compare.
    (folder / "resume" / LEDGER).unlink()
    assert run(folder, data | {"seeds": [1, 2, 3]}) == 0
    assert run(folder, data | {"seeds": [1, 2, 3]}) == 0  # with the ledger: nothing to do
    runs = child_runs(MlflowClient(uri), "resume")
    assert sorted(r.data.tags["seed"] for r in runs) == ["1", "2", "3"]
    assert {r.info.status for r in runs} == {"FINISHED"}


def test_two_drivers_two_studies_one_database_at_once(pg_env: Postgres, folder: Path) -> None:
    # A fresh database: the two drivers also race to create MLflow's tables.
    uri = pg_env.create_database("shared")
    env = {**os.environ, **pg_env.env, "RAY_USAGE_STATS_ENABLED": "0"}
    drivers = []
    for name in ("first", "second"):
        config = folder / f"{name}.yaml"
        config.write_text(yaml.safe_dump(study_data(folder, name, uri, seeds=[1, 2, 3], backend="serial")))
        drivers.append(subprocess.Popen([sys.executable, "-m", "wdrbo_dist", "run", str(config), "--quiet"],
                                        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [driver.communicate(timeout=300) for driver in drivers]
    assert [driver.returncode for driver in drivers] == [0, 0], outputs
    client = MlflowClient(uri)
    for name in ("first", "second"):
        runs = child_runs(client, name)
        assert sorted(r.data.tags["seed"] for r in runs) == ["1", "2", "3"]
        assert {r.info.status for r in runs} == {"FINISHED"}
        assert {r.data.tags["study"] for r in runs} == {name}
    assert_no_password(pg_env.password, folder, *(text for pair in outputs for text in pair))


@pytest.mark.parametrize("case", ["wrong password", "nothing listens", "no such database"])
def test_a_database_that_cannot_be_used_stops_the_command_before_any_run(
        case: str, pg_env: Postgres, folder: Path, monkeypatch, capsys) -> None:
    uri, reason = {
        "wrong password": (pg_env.uri("postgres"), "password authentication failed"),
        "nothing listens": (f"postgresql+psycopg://127.0.0.1:{free_port()}/postgres", "Connection refused"),
        "no such database": (pg_env.uri("absent"), 'database "absent" does not exist'),
    }[case]
    if case == "wrong password":
        monkeypatch.setenv("PGPASSWORD", "not-" + pg_env.password)
    assert run(folder, study_data(folder, "refused", uri)) == 2
    captured = capsys.readouterr()
    [line] = captured.err.strip().splitlines()
    assert line.startswith(f"wdrbo-dist run: error: tracking_uri {uri}: cannot connect to PostgreSQL: "), line
    assert reason in line and captured.out == ""
    assert not (folder / "refused").exists()  # no run started
    assert_no_password(pg_env.password, folder, captured.err)


def test_the_password_may_come_from_a_pgpass_file(postgres: Postgres, folder: Path, monkeypatch) -> None:
    pgpass = folder / "pgpass"
    pgpass.write_text(f"127.0.0.1:{postgres.port}:*:{postgres.user}:{postgres.password}\n")
    pgpass.chmod(0o600)
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGUSER", postgres.user)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    check_tracking_uri(postgres.create_database("pgpass"))  # connects and creates MLflow's tables


def test_an_mlflow_server_on_the_database_serves_the_study(pg_env: Postgres, folder: Path, monkeypatch) -> None:
    # As the lab runs it: several workers, the basic-auth app on top, the database's
    # credentials in the server's environment.
    uri = pg_env.create_database("served")
    assert run(folder, study_data(folder, "served", uri, backend="serial")) == 0
    root = folder / "server"
    root.mkdir()
    admin = secrets.token_urlsafe(16)
    server = start_mlflow_server(root, admin_password=admin, backend_store_uri=uri, workers=2, env=pg_env.env)
    try:
        wait_for(lambda: server.process.poll() is not None or server.up(), 120, "mlflow server", server.log)
        assert server.process.poll() is None, server.log.read_text()[-3000:]
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", admin)
        runs = child_runs(MlflowClient(server.uri), "served")
        assert sorted(r.info.run_name for r in runs) == ["newsvendor|random|s1", "newsvendor|random|s2"]
    finally:
        stop(server.process, grace_s=10)


def test_a_batch_sent_again_adds_no_row(pg_env: Postgres, folder: Path) -> None:
    # One transaction per batch, and ON CONFLICT DO NOTHING: rows written twice are one child run.
    uri = pg_env.create_database("again")
    check_tracking_uri(uri)
    study = parse_study_config(study_data(folder, "again", uri, backend="serial"))
    tracker = StudyTracker(uri, "again", store=ResultStore(study.output_dir))
    tracker.start(study, "name: again\n")
    result = finished(spec(seed=1))
    rows = tracker.worker_hook()(result)
    for _ in range(2):
        tracker.batch.add(result, rows)
        assert tracker.batch.write() == [result.spec.run_key]
    assert [status for _, status in tracker.child_runs()[result.spec.run_key]] == ["FINISHED"]
    [run] = child_runs(MlflowClient(uri), "again")
    assert len(MlflowClient(uri).get_metric_history(run.info.run_id, "regret")) == 7
