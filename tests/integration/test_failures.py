"""A lost node, a dead head or a dead tracking server never costs a run: on a two-node Ray
cluster of the test's own (on 127.0.0.1), kill the worker node's raylet or the whole head while
a driver is attached; or stop the MLflow server mid-study. Afterwards nothing is FAILED, at most
one more `run` completes the study, and every run key has one parquet and one FINISHED MLflow
child (lost attempts end KILLED)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from wdrbo_dist.study.config import load_study_config
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.errors import ExitCode
from wdrbo_dist.execution import ray_backend

from tests.support.local_servers import node_raylet, processes, start_mlflow_server, started_ray_cluster, stop, wait_for
from test_cluster import CLI, _task_processes, finished_once, write_study

pytestmark = pytest.mark.integration


def _wait_for_a_run_on(cluster, node_pid: int | None, driver: subprocess.Popen, timeout_s: float = 180) -> str:
    """The label of a run that is running now (on the node started as `node_pid`, if given)."""
    deadline = time.monotonic() + timeout_s
    while driver.poll() is None and time.monotonic() < deadline:
        table = processes()
        for pid, label, age in _task_processes(cluster):
            ancestor = pid
            while ancestor in table and ancestor not in cluster.pids:
                ancestor = table[ancestor][0]
            if age > 1.0 and (node_pid is None or ancestor == node_pid):
                return label
        time.sleep(0.2)
    raise AssertionError(f"no run was seen running (driver exit {driver.poll()})")


def _assert_whole(config: Path, uri: str) -> None:
    study = load_study_config(config)
    store = ResultStore(study.output_dir)
    keys = {r.run_key for r in study.runs}
    assert store.failed_keys() == set()
    assert store.finished_keys() == keys
    assert {p.stem for p in (study.output_dir / "runs").glob("*.parquet")} == keys
    statuses = finished_once(uri, study.name)
    assert set(statuses) == keys
    assert all(s.count("FINISHED") == 1 and set(s) <= {"FINISHED", "KILLED"} for s in statuses.values()), statuses


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, timeout=600)


class StoppableServer:
    """A tracking server of this module's own, for the tests that stop it and start it again (on
    its port, its store kept): the next of them finds it up, not to be started from scratch."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.server = start_mlflow_server(root)

    @property
    def uri(self) -> str:
        return self.server.uri

    def wait(self, what: str = "mlflow server") -> None:
        wait_for(self.server.up, 120, what, self.server.log)

    def stop(self) -> None:
        stop(self.server.process, grace_s=10)  # the server this module started

    def start_again(self) -> None:
        self.server = start_mlflow_server(self.root, port=int(self.uri.rsplit(":", 1)[1]),
                                          admin_password=self.server.admin_password)  # its users are kept
        self.wait("mlflow server again")


@pytest.fixture(scope="module", autouse=True)
def _module_server(tmp_path_factory) -> Iterator[StoppableServer]:
    """Started as the module starts, without waiting: it boots while the cluster tests run."""
    server = StoppableServer(tmp_path_factory.mktemp("server"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def stoppable_server(_module_server: StoppableServer, monkeypatch: pytest.MonkeyPatch) -> StoppableServer:
    """The module's own server, up (started again if a test before left it stopped), its login in
    this test's environment."""
    if _module_server.server.process.poll() is None:
        _module_server.wait()
    else:
        _module_server.start_again()
    _module_server.server.log_in(monkeypatch)
    return _module_server


def test_a_worker_node_lost_mid_study_costs_no_run(mlflow_server, tmp_path):
    with started_ray_cluster("wdn") as cluster:
        config = write_study(tmp_path / "study.yaml", "node-lost", mlflow_server.uri, tmp_path / "out",
                             evaluations=14, seeds=[0, 1], algorithms=["erbo"])
        driver = subprocess.Popen([CLI, "run", str(config), "--address", cluster.gcs_address, "--quiet"],
                                  env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            label = _wait_for_a_run_on(cluster, cluster.processes[1].pid, driver)
            os.kill(node_raylet(cluster, "node2"), signal.SIGKILL)  # the node this test started
            output, _ = driver.communicate(timeout=600)
        finally:
            if driver.poll() is None:
                driver.kill()
        assert driver.returncode in (0, ExitCode.UNAVAILABLE), output[-3000:]
        assert "FAILED" not in output, output[-3000:]
        if driver.returncode:  # runs Ray gave up on are resubmitted by the next command
            again = _run(["run", str(config), "--address", cluster.gcs_address, "--quiet"], cluster.env)
            assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    _assert_whole(config, mlflow_server.uri)
    assert label  # a run was on the lost node when it went


# The head the next test kills is dead, not slow: its driver may take it for gone after a few
# seconds of silence instead of the product's GCS_SILENCE_S (15 s, so that a live head that
# stalls a while is not taken for gone). `wdrbo-dist run` with that one constant lowered.
SILENCE_S = 3.0
RUN_WITH_SHORT_SILENCE = [
    sys.executable, "-c",
    "import sys; from wdrbo_dist.execution import ray_backend; "
    f"ray_backend.GCS_SILENCE_S = {SILENCE_S}; from wdrbo_dist.cli import main; sys.exit(main())",
]


def test_a_dead_head_stops_the_driver_with_its_own_exit_code_and_the_next_run_finishes(mlflow_server, tmp_path):
    config = write_study(tmp_path / "study.yaml", "head-lost", mlflow_server.uri, tmp_path / "out",
                         evaluations=14, seeds=[0, 1], algorithms=["erbo"])
    with started_ray_cluster("wdh") as cluster:
        driver = subprocess.Popen([*RUN_WITH_SHORT_SILENCE, "run", str(config), "--address", cluster.gcs_address,
                                   "--quiet"], env=cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True)
        try:
            _wait_for_a_run_on(cluster, None, driver)
            killed_at = time.monotonic()
            os.killpg(cluster.processes[0].pid, signal.SIGKILL)  # the head this test started, whole
            output, _ = driver.communicate(timeout=300)
            stopped_after_s = time.monotonic() - killed_at
        finally:
            if driver.poll() is None:
                driver.kill()
            # The other node, its head gone, does not end on SIGTERM: it would hold the cluster's
            # stop for the whole grace (30 s), waiting on the head. Its group ends now.
            for node in cluster.processes[1:]:
                stop(node, grace_s=0)  # a node this test started
    assert driver.returncode == ExitCode.UNAVAILABLE, output[-3000:]
    assert "cluster gone: the Ray cluster's head" in output and "run the same command again" in output, output[-3000:]
    assert "Traceback" not in output and "FAILED" not in output, output[-3000:]
    assert f"stopped answering for {SILENCE_S:.0f} s" in output, output[-3000:]
    # Before Ray would end the driver itself (its GCS timeout, 60 s), had it waited the product's own silence.
    assert stopped_after_s - SILENCE_S + ray_backend.GCS_SILENCE_S < 60
    assert ResultStore(load_study_config(config).output_dir).failed_keys() == set()
    # The cluster is gone: the same study finishes on this machine's own processes.
    again = _run(["run", str(config), "--backend", "local", "--quiet"], {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    _assert_whole(config, mlflow_server.uri)


def test_a_tracking_server_that_stops_mid_study_costs_no_run_and_catches_up_at_the_next_start(
    stoppable_server, tmp_path
):
    # Eight runs: with a task waiting at each pool process, four would all be done before the
    # server has stopped; runs still to come after it are what the test needs.
    config = write_study(tmp_path / "study.yaml", "server-lost", stoppable_server.uri, tmp_path / "out",
                         evaluations=9, seeds=[0, 1, 2, 3], algorithms=["erbo"])
    runs = tmp_path / "out" / "runs"
    driver = subprocess.Popen([CLI, "run", str(config), "--backend", "local", "--quiet"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: len(list(runs.glob("*.parquet"))) >= 1 or driver.poll() is not None, 300,
                 "a first finished run")
        stoppable_server.stop()
        output, _ = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, output[-3000:]
    assert "mlflow stopped answering at" in output and "Traceback" not in output, output[-3000:]
    study = load_study_config(config)
    assert ResultStore(study.output_dir).finished_keys() == {r.run_key for r in study.runs}
    # The server is back: the next start logs what it missed, and there is nothing left to run.
    stoppable_server.start_again()
    again = _run(["run", str(config), "--backend", "local", "--quiet"], dict(os.environ))
    assert again.returncode == 0 and "0 finished, 0 failed, 8 skipped (already finished)" in again.stdout, (
        again.stdout[-2000:] + again.stderr[-2000:])
    assert "mlflow: logged " in again.stderr
    _assert_whole(config, stoppable_server.uri)


def test_results_a_stopped_server_missed_are_logged_when_it_answers_again(stoppable_server, tmp_path, monkeypatch):
    from wdrbo_dist.driver import study as study_module
    from wdrbo_dist.execution.task import Task, execute
    from wdrbo_dist.driver.plan import plan_study
    from wdrbo_dist.driver.report import StudyReport
    from wdrbo_dist.driver.study import run_captured
    from wdrbo_dist.tracking import connection
    from wdrbo_dist.tracking.study_tracker import StudyTracker

    config = write_study(tmp_path / "study.yaml", "backlog", stoppable_server.uri, tmp_path / "out",
                         evaluations=6, seeds=[0], algorithms=["gp-ucb"])
    study = load_study_config(config)
    store = ResultStore(study.output_dir)
    tracker = StudyTracker(study.tracking_uri, study.name)
    tracker.start(study, config.read_text())
    report = StudyReport(study=study, plan=plan_study(study, store))
    hook = tracker.worker_hook()
    first, second = (execute(Task(spec=spec), run_captured, hook) for spec in study.runs)
    assert first.hook_value and second.hook_value  # each worker opened its child run
    stoppable_server.stop()
    study_module._settle(first, store, tracker, report)  # the server is gone
    assert tracker.unreachable and len(tracker.backlog) == 1
    stoppable_server.start_again()
    monkeypatch.setattr(connection, "PROBE_INTERVAL_S", 0.0)
    study_module._settle(second, store, tracker, report)  # back: both are logged
    assert not tracker.unreachable and tracker.backlog == []
    assert "mlflow answers again: logged the 2 runs it missed" in report.tracking_warnings
    statuses = finished_once(stoppable_server.uri, "backlog")
    assert statuses == {spec.run_key: ["FINISHED"] for spec in study.runs}
