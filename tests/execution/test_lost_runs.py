"""A run the infrastructure loses is never FAILED: the backend submits it again after a back-off,
then gives it up as lost for this command, and the next command runs it."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import yaml

from wdrbo_dist.execution import local, ray_backend
from wdrbo_dist.execution.backends import map_tasks
from wdrbo_dist.cli.study import report_lines
from wdrbo_dist.study.config import parse_study_config
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.driver.plan import make_tasks
from wdrbo_dist.driver.study import run_captured, run_study
from wdrbo_dist.errors import ExitCode
from wdrbo_dist.tracking.study_tracker import StudyTracker

from test_backends import CLI, FAST, _pool_children, tiny_study

QUICK_BACKOFF = (0.05, 0.05, 0.05)


def _kill_pool_processes_until(stop: threading.Event, killed: list[int]) -> None:
    """SIGKILL every pool process this test's driver spawns, as they appear, until `stop`."""
    while not stop.is_set():
        for pid in _pool_children():
            try:
                os.kill(pid, 9)  # a process of the pool this test started
                killed.append(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def test_a_local_run_whose_process_keeps_dying_is_lost_not_failed_and_the_next_run_does_it(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(local, "RESUBMIT_DELAYS_S", QUICK_BACKOFF)
    study = parse_study_config(tiny_study(tmp_path / "out", evaluations=9, seeds=[1],
                                          algorithms=[{"name": "erbo", "options": FAST}],
                                          tracking_uri=f"sqlite:///{tmp_path}/mlflow.db"))
    stop, killed, lines = threading.Event(), [], []
    killer = threading.Thread(target=_kill_pool_processes_until, args=(stop, killed), daemon=True)
    killer.start()
    try:
        report = run_study(study, backend="local", workers=2, echo=lines.append)
    finally:
        stop.set()
        killer.join()
    assert killed
    assert report.exit_code == ExitCode.UNAVAILABLE
    assert not report.failed and len(report.lost) == 2
    assert all(o.attempts == len(QUICK_BACKOFF) + 1 for o in report.lost)
    text = "\n".join(report_lines(report))
    assert "0 finished, 0 failed, 2 lost" in text and "LOST newsvendor|erbo|s1" in text and "died 4 times" in text
    store = ResultStore(study.output_dir)
    assert store.finished_keys() == set() and store.failed_keys() == set()  # nothing recorded
    # The same command, on a machine that behaves again, does the lost runs.
    again = run_study(study, backend="local", workers=2, echo=lines.append)
    assert again.exit_code == 0 and len(again.finished) == 2
    assert store.finished_keys() == {r.run_key for r in study.runs}
    assert _pool_children() == []
    tracker = StudyTracker(study.tracking_uri, study.name)
    tracker.experiment_id = tracker._experiment()
    assert {key: [status for _, status in runs] for key, runs in tracker.child_runs().items()} == {
        key: ["FINISHED"] for key in store.finished_keys()
    }


def test_ray_submits_a_run_whose_worker_keeps_dying_again_then_gives_it_up_as_lost(
    tmp_path: Path, monkeypatch, shared_ray: Path
) -> None:
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    from raising_problem import DyingProblem
    from wdrbo_dist.problems import PROBLEMS

    attempts = shared_ray  # where the shared Ray's workers count their attempts (conftest.py)
    monkeypatch.setattr(ray_backend, "RESUBMIT_DELAYS_S", QUICK_BACKOFF)
    monkeypatch.setattr(ray_backend, "MAX_RETRIES", 0)  # Ray's own retries: covered by Ray
    monkeypatch.setitem(PROBLEMS, "dies", DyingProblem)
    study = parse_study_config(tiny_study(tmp_path, problems=["dies", "newsvendor"], seeds=[1],
                                          algorithms=[{"name": "erbo", "options": FAST}]))
    outcomes = list(map_tasks(make_tasks(study, study.runs), "ray", workers=2, run=run_captured))
    by_problem = {o.task.spec.problem: o for o in outcomes}
    assert by_problem["newsvendor"].result.ok and by_problem["newsvendor"].lost is None
    dead = by_problem["dies"]
    assert dead.lost and "WorkerCrashedError" in dead.lost, dead.lost
    assert dead.attempts == len(QUICK_BACKOFF) + 1
    assert len(attempts.read_text().split()) == len(QUICK_BACKOFF) + 1  # one worker per submission


def test_an_address_that_does_not_answer_is_one_line_and_exit_2_before_any_work(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump(tiny_study(tmp_path / "out")))
    out = subprocess.run([CLI, "run", str(config), "--backend", "ray", "--address", f"127.0.0.1:{port}"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f"--address 127.0.0.1:{port}: nothing answers" in lines[0], out.stderr
    assert not (tmp_path / "out").exists()  # before any work


def test_auto_or_ray_address_naming_a_dead_cluster_is_one_line_and_exit_2_with_nothing_written(tmp_path: Path) -> None:
    import shutil
    import socket
    import tempfile

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump(tiny_study(tmp_path / "out")))
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # what a `ray start` that died left behind
    (ray_tmp / "ray").mkdir()
    (ray_tmp / "ray" / "ray_current_cluster").write_text(f"127.0.0.1:{port}\n")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    cases = (
        (["--address", "auto"], {"RAY_TMPDIR": str(ray_tmp)}, "--address auto"),
        ([], {"RAY_ADDRESS": f"127.0.0.1:{port}"}, f"RAY_ADDRESS=127.0.0.1:{port}"),
    )
    started, drivers = time.monotonic(), []
    try:
        for args, extra, _ in cases:  # both commands at once: each one waits mostly on its imports
            drivers.append(subprocess.Popen([CLI, "run", str(config), "--backend", "ray", *args], env=env | extra,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        for driver, (_, _, named) in zip(drivers, cases):
            _, stderr = driver.communicate(timeout=120)
            assert driver.returncode == 2, stderr
            lines = stderr.strip().splitlines()
            assert len(lines) == 1 and f"{named}: nothing answers at 127.0.0.1:{port}" in lines[0], stderr
            assert time.monotonic() - started < 60
        assert not (tmp_path / "out").exists()  # no study.json, lock or log
    finally:
        for driver in drivers:
            if driver.poll() is None:
                driver.kill()  # a command this test started
                driver.communicate()
        shutil.rmtree(ray_tmp, ignore_errors=True)
