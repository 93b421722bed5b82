"""The study driver: failures recorded and named, resume, status matrix, tracking fail-fast."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from mlflow.tracking import MlflowClient

from wdrbo_dist.driver import study as study_module
from wdrbo_dist.cli import main
from wdrbo_dist.cli.ctrl_c import CtrlC
from wdrbo_dist.study.config import parse_study_config
from wdrbo_dist.problems import PROBLEMS
from wdrbo_dist.problems.camel import ThreeHumpCamel
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.study.spec import StudySpec
from wdrbo_dist.driver.study import run_study
from wdrbo_dist.tracking.study_tracker import LEDGER, StudyTracker

FAST = {"raw_samples": 32, "num_restarts": 2}


class RaisingProblem(ThreeHumpCamel):
    """A problem whose truth computation breaks on the first evaluation."""

    name: ClassVar[str] = "raises"

    def expected_value(self, x):
        raise FloatingPointError("the truth is not available today")


@pytest.fixture()
def raising_problem(monkeypatch):
    monkeypatch.setitem(PROBLEMS, "raises", RaisingProblem)


def study_data(tmp_path: Path, **changes) -> dict:
    return {
        "name": "drv", "problems": ["raises", "newsvendor"], "algorithms": [{"name": "erbo", "options": FAST}],
        "seeds": [1, 2], "evaluations": 7, "init_size": 5, "backend": "serial", "workers": 1,
        "tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "output_dir": str(tmp_path / "out"),
    } | changes


def test_a_raising_run_is_recorded_failed_named_and_the_others_finish(tmp_path, raising_problem, capsys):
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump(study_data(tmp_path)))
    assert main(["run", str(config), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "study drv: 4 runs; this command: 2 finished, 2 failed" in out
    assert "FAILED raises|erbo|s1 [" in out and "FloatingPointError: the truth is not available today" in out
    store = ResultStore(tmp_path / "out")
    assert len(store.finished_keys()) == 2 and len(store.failed_keys()) == 2
    key = next(iter(store.failed_keys()))
    meta = store.read_meta(key)
    assert meta["status"] == "FAILED" and "Traceback" in meta["error"] and "expected_value" in meta["error"]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("drv").experiment_id], "tags.role = 'run'")
    assert sorted(r.info.status for r in runs) == ["FAILED", "FAILED", "FINISHED", "FINISHED"]

    # Again: nothing runs (a deterministic error is not retried), the failures are named again.
    assert main(["run", str(config), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "0 finished, 0 failed, 2 skipped (already finished), 2 skipped (failed before)" in out
    assert "FAILED before raises|erbo|s2" in out and "--rerun-failed" in out
    # --rerun-failed tries them again (and they fail again).
    assert main(["run", str(config), "--quiet", "--rerun-failed"]) == 1
    assert "0 finished, 2 failed, 2 skipped (already finished)" in capsys.readouterr().out

    assert main(["status", str(config)]) == 0
    status = capsys.readouterr().out.splitlines()
    assert [line.split() for line in status[-3:]] == [
        ["raises", "0/2/0"], ["newsvendor", "2/0/0"], ["total:", "2", "done,", "2", "failed,", "0", "missing", "of", "4"]]
    # `status` of the output folder, as `summarize` and `report` take it: the same matrix.
    assert main(["status", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.splitlines()[-3:] == status[-3:]


def test_the_start_line_of_a_serial_study_names_no_workers(tmp_path):
    lines: list[str] = []
    run_study(parse_study_config(study_data(tmp_path, problems=["newsvendor"], seeds=[1], tracking_uri="none",
                                            workers=2)), echo=lines.append)
    assert any("1 to run on serial in this process" in line for line in lines), lines
    assert not any("workers" in line for line in lines)


def test_resume_runs_only_what_is_missing_and_force_runs_everything(tmp_path):
    data = study_data(tmp_path, problems=["newsvendor"], seeds=[1], tracking_uri="none")
    first = run_study(parse_study_config(data))
    assert (len(first.finished), first.exit_code) == (1, 0)
    store = ResultStore(tmp_path / "out")
    [key] = store.finished_keys()
    saved = store.read_meta(key)["saved_at"]
    grown = run_study(parse_study_config(data | {"seeds": [1, 2]}))
    assert [r.spec.seed for r in grown.finished] == [2] and len(grown.plan.finished) == 1
    assert store.read_meta(key)["saved_at"] == saved  # not re-run
    forced = run_study(parse_study_config(data), force=True)
    assert len(forced.finished) == 1 and store.read_meta(key)["saved_at"] > saved


def test_an_unreachable_tracking_server_stops_before_any_run(tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump(study_data(tmp_path, problems=["newsvendor"], tracking_uri=f"http://127.0.0.1:{port}")))
    assert main(["run", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"wdrbo-dist run: error: tracking_uri http://127.0.0.1:{port}: no MLflow server answers "
                   "(ConnectionError); start one with `mlflow server --host HOST --port PORT` or use tracking_uri: none"]
    assert not (tmp_path / "out").exists()


# Ctrl-C in the study loop (serial backend: the runs go on in this process's main thread), with the
# command line's guard, as `wdrbo-dist run` hands it to the driver.

@pytest.fixture()
def ctrl_c_default():
    """Python's own SIGINT handler, as in a terminal (`make test &` would start pytest ignoring it)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def press_ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):  # Python runs the handler at its next check, somewhere in this loop
        pass


class DropsCtrlC:
    """Ctrl-C pressed while the main thread runs a finaliser: Python prints the KeyboardInterrupt
    raised there ("Exception ignored in ...") and drops it."""

    def __del__(self) -> None:
        press_ctrl_c()


def four_runs(tmp_path: Path) -> StudySpec:
    return parse_study_config(study_data(tmp_path, problems=["newsvendor", "three-hump-camel"]))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the dropped one
def test_a_ctrl_c_a_finaliser_dropped_still_stops_the_study_after_the_next_outcome(tmp_path, monkeypatch, ctrl_c_default):
    serial = study_module.map_tasks

    def backend_dropping_ctrl_c(tasks, backend, workers=1, address=None, **functions):
        for index, outcome in enumerate(serial(tasks, "serial", **functions)):
            if index == 1:
                DropsCtrlC()  # collected at once, in the middle of the backend's own work
            yield outcome

    monkeypatch.setattr(study_module, "map_tasks", backend_dropping_ctrl_c)
    report = run_study(four_runs(tmp_path), ctrl_c=CtrlC())
    assert (report.interrupted, report.exit_code, len(report.finished), report.not_done) == (True, 130, 2, 2)
    assert len(ResultStore(tmp_path / "out").finished_keys()) == 2


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_while_an_outcome_is_stored_and_logged_waits_for_it_unless_pressed_twice(
        tmp_path, monkeypatch, ctrl_c_default, presses):
    record, calls = StudyTracker.record, []

    def record_while_ctrl_c_is_pressed(self, *args):
        if calls:  # the end of the command logs a run the loop did not: no Ctrl-C there
            return record(self, *args)
        calls.append("started")
        for _ in range(presses):
            press_ctrl_c()
        record(self, *args)
        calls.append("logged")

    monkeypatch.setattr(StudyTracker, "record", record_while_ctrl_c_is_pressed)
    report = run_study(four_runs(tmp_path), ctrl_c=CtrlC())
    assert calls[:2] == (["started", "logged"] if presses == 1 else ["started"])
    # The store saves on a thread while the loop receives the next outcome: what was received
    # before the Ctrl-C (the run being logged, and the one after it by then) is stored.
    stored = len(ResultStore(tmp_path / "out").finished_keys())
    assert (report.interrupted, report.exit_code, len(report.finished), report.not_done) == (True, 130, stored, 4 - stored)
    assert stored in (1, 2)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    experiment = client.get_experiment_by_name("drv").experiment_id

    def finished_in_mlflow() -> int:
        return sum(r.info.status == "FINISHED" for r in client.search_runs([experiment], "tags.role = 'run'"))

    # Pressed twice, the command leaves MLflow alone (a call it stopped may hold the store's lock)
    # and says so; the next command logs the stored run with the rest.
    assert finished_in_mlflow() == (stored if presses == 1 else 0)
    assert any("second Ctrl-C" in line for line in report.tracking_warnings) == (presses == 2)
    again = run_study(four_runs(tmp_path), ctrl_c=CtrlC())
    assert (again.exit_code, len(again.finished), finished_in_mlflow()) == (0, 4 - stored, 4)


def test_mlflow_hears_of_a_run_only_once_the_store_holds_it(tmp_path, monkeypatch) -> None:
    # The store saves on a thread of its own; the tracker still gets each result after its save.
    record, recorded, unstored = StudyTracker.record, [], []

    def record_checking_the_store(self, result, *args):
        recorded.append(result.spec.label)
        if not ResultStore(tmp_path / "out").is_finished(result.spec.run_key):
            unstored.append(result.spec.label)
        return record(self, result, *args)

    monkeypatch.setattr(StudyTracker, "record", record_checking_the_store)
    report = run_study(four_runs(tmp_path))
    assert report.exit_code == 0 and len(report.finished) == len(recorded) == 4 and unstored == []


def test_a_clean_command_leaves_its_ledger_and_the_next_start_reads_no_child_runs_back(tmp_path, monkeypatch, ctrl_c_default):
    # A resume of a finished 10^5-run study must not page through MLflow's child runs.
    report = run_study(four_runs(tmp_path), ctrl_c=CtrlC())
    ledger = tmp_path / "out" / LEDGER
    assert report.exit_code == 0 and len(json.loads(ledger.read_text())["run_keys"]) == 4
    with monkeypatch.context() as m:
        m.setattr(StudyTracker, "child_runs", lambda self: pytest.fail("read the child runs back"))
        again = run_study(four_runs(tmp_path), ctrl_c=CtrlC())
    assert (again.exit_code, len(again.finished)) == (0, 0) and ledger.exists()
    # A command cut short leaves none: the next start compares with MLflow.
    record, pressed = StudyTracker.record, []

    def record_while_ctrl_c_is_pressed(self, *args):
        if not pressed:
            pressed.append(press_ctrl_c())
        return record(self, *args)

    monkeypatch.setattr(StudyTracker, "record", record_while_ctrl_c_is_pressed)
    ResultStore(tmp_path / "out").runs_dir.joinpath(f"{four_runs(tmp_path).runs[0].run_key}.json").unlink()
    cut = run_study(four_runs(tmp_path), ctrl_c=CtrlC())
    assert cut.interrupted and not ledger.exists()


def test_a_driver_started_ignoring_sigint_keeps_ignoring_it(tmp_path, monkeypatch):
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        record = StudyTracker.record
        monkeypatch.setattr(StudyTracker, "record", lambda self, *args: (press_ctrl_c(), record(self, *args))[1])
        report = run_study(four_runs(tmp_path), ctrl_c=CtrlC())
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert (report.interrupted, report.exit_code, len(report.finished)) == (False, 0, 4)
