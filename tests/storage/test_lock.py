"""One driver per output folder: a second `wdrbo-dist run` on it refuses before any work, naming
the first; a driver that was killed leaves nothing that blocks the next one."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from wdrbo_dist.cli import main
from wdrbo_dist.errors import ExitCode
from wdrbo_dist.study.config import load_study_config
from wdrbo_dist.run.records import CORE_COLUMNS
from wdrbo_dist.run.spec import RunResult
from wdrbo_dist.storage.lock import LOCK_NAME, FolderInUse, driver_lock
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.tracking.connection import check_tracking_uri

CLI = str(Path(sys.executable).with_name("wdrbo-dist"))
FAST = {"raw_samples": 16, "num_restarts": 2}
HELD_BY = "wdrbo-dist run configs/held.yaml"
# A process that holds the lock, as a driver does, and has started a child of its own (as a
# driver starts pool or Ray processes) that outlives it when it is killed.
HOLDER = f"""
import subprocess, sys, time
from wdrbo_dist.storage.lock import driver_lock
with driver_lock(sys.argv[1], command={HELD_BY!r}):
    child = subprocess.Popen(["sleep", "300"], close_fds=False)
    print(child.pid, flush=True)
    time.sleep(300)
"""


@pytest.fixture
def holder(tmp_path: Path):
    """A real second process holding the lock of tmp_path/out; yields (process, its child's pid)."""
    process = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "out")], stdout=subprocess.PIPE, text=True)
    child = int(process.stdout.readline())
    try:
        yield process, child
    finally:
        for pid in (process.pid, child):  # only the processes this fixture started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait(timeout=30)


def write_config(tmp_path: Path, **changes) -> Path:
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump({
        "name": "locked", "problems": ["newsvendor"], "algorithms": [{"name": "gp-ucb", "options": FAST}],
        "seeds": [1, 2], "evaluations": 6, "init_size": 5, "backend": "serial", "tracking_uri": "none",
        "output_dir": str(tmp_path / "out"),
    } | changes))
    return config


def test_a_second_driver_refuses_with_one_line_naming_the_first(tmp_path: Path, holder, capsys) -> None:
    process, _ = holder
    config = write_config(tmp_path)
    assert main(["run", str(config), "--quiet"]) == ExitCode.IN_USE == 75
    out, err = capsys.readouterr()
    [line] = err.splitlines()
    assert out == ""
    assert line.startswith(f"wdrbo-dist run: error: {tmp_path / 'out'} is in use by another driver "
                           f"(pid {process.pid} on host {socket.gethostname()}, started ")
    assert line.endswith(f", command: {HELD_BY}); wait for it to end or stop it, then run again")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [LOCK_NAME]  # no work was done


def test_a_killed_driver_does_not_block_the_next(tmp_path: Path, holder, capsys) -> None:
    """SIGKILL gives the driver no chance to clean up; the OS drops the lock all the same, and
    a process the driver had started, still running, does not hold it either."""
    process, child = holder
    with pytest.raises(FolderInUse):
        with driver_lock(tmp_path / "out"):
            pass
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    os.kill(child, 0)  # the orphan is still alive
    assert f'"pid": {process.pid}' in (tmp_path / "out" / LOCK_NAME).read_text()  # its note is left behind
    with driver_lock(tmp_path / "out", command="next") as lock:
        assert lock == tmp_path / "out" / LOCK_NAME and '"command": "next"' in lock.read_text()
    assert lock.read_text() == ""  # released: nobody named
    # ... and the same command runs (here: nothing left to do, every run already finished).
    config = write_config(tmp_path)
    study = load_study_config(config)
    store = ResultStore(study.output_dir)
    for spec in study.runs:
        frame = pd.DataFrame({c: np.zeros(spec.evaluations) for c in CORE_COLUMNS})
        store.save(RunResult(spec=spec, status="FINISHED", records=frame, wall_time_s=1.0))
    assert main(["run", str(config), "--quiet"]) == 0
    assert "0 finished, 0 failed, 2 skipped (already finished)" in capsys.readouterr().out


def test_a_running_study_keeps_its_runs_when_a_second_driver_is_started(tmp_path: Path, capsys) -> None:
    """Without the lock, the second driver's start-up would mark the first one's MLflow run of
    the run in flight KILLED and start the same runs again."""
    config = write_config(tmp_path, seeds=list(range(8)), evaluations=10, tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    study = load_study_config(config)
    store = ResultStore(study.output_dir)
    check_tracking_uri(study.tracking_uri)  # MLflow imported and its database made here first: a prompt second start
    first = subprocess.Popen([CLI, "run", str(config), "--quiet"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 300
        while not store.finished_keys():
            assert first.poll() is None, first.communicate()[0][-3000:]
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.2)
        capsys.readouterr()  # MLflow's own log lines from creating the database
        assert main(["run", str(config), "--quiet"]) == ExitCode.IN_USE
        [line] = capsys.readouterr().err.splitlines()
        assert f"(pid {first.pid} on host " in line and f"command: {CLI} run {config} --quiet)" in line
        output, _ = first.communicate(timeout=600)
    finally:
        if first.poll() is None:
            first.kill()  # the driver this test started
            first.wait()
    assert first.returncode == 0, output[-3000:]
    assert "8 finished, 0 failed, 0 skipped" in output
    client = MlflowClient(study.tracking_uri)
    experiment = client.get_experiment_by_name("locked")
    children = client.search_runs([experiment.experiment_id], "tags.role = 'run'")
    assert sorted((r.data.tags["run_key"], r.info.status) for r in children) == sorted(
        (r.run_key, "FINISHED") for r in study.runs)


def test_the_lock_holds_when_its_file_is_deleted(tmp_path: Path) -> None:
    """Someone deletes driver.lock while a driver works: a second driver still stops."""

    with driver_lock(tmp_path, command="first") as held:
        assert held is not None
        (tmp_path / LOCK_NAME).unlink()
        with pytest.raises(FolderInUse):
            with driver_lock(tmp_path, command="second"):
                pass
    with driver_lock(tmp_path, command="third") as held:  # released with the first
        assert held is not None
