"""A study survives its driver: Ctrl-C cancels cleanly, SIGKILL loses nothing, and the same
command then finishes only what is missing, with every run FINISHED once in MLflow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from mlflow.tracking import MlflowClient

from tests.support.processes import group_alive
from wdrbo_dist.study.config import load_study_config
from wdrbo_dist.storage.store import ResultStore

CLI = str(Path(sys.executable).with_name("wdrbo-dist"))
FAST = {"raw_samples": 32, "num_restarts": 2}


def _as_from_a_terminal() -> None:
    # A shell gives a foreground command the default SIGINT; a process started in the
    # background of a non-interactive shell (`make test &`) ignores it, and so would the driver.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start(config: Path, *args: str) -> subprocess.Popen:
    # Its own process group, like a command started from a shell.
    return subprocess.Popen([CLI, "run", str(config), "--quiet", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=_as_from_a_terminal)


def wait_finished(store: ResultStore, count: int, driver: subprocess.Popen, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while len(store.finished_keys()) < count:
        assert driver.poll() is None, driver.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.2)


def ignored_signals(pid: int) -> str:
    """The SigIgn mask of a process, from /proc (a process inherits ignored signals)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return line.split()[1]
    return "?"


def test_interrupt_then_kill_then_resume(tmp_path: Path) -> None:
    config = tmp_path / "study.yaml"
    config.write_text(yaml.safe_dump({
        "name": "resume", "problems": ["newsvendor", "three-hump-camel"], "algorithms": [{"name": "gp-ucb", "options": FAST}],
        "seeds": [1, 2, 3, 4, 5, 6], "evaluations": 25, "init_size": 5, "backend": "local", "workers": 2,
        "tracking_uri": f"sqlite:///{tmp_path}/mlflow.db", "output_dir": str(tmp_path / "out"),
    }))
    study = load_study_config(config)
    store = ResultStore(study.output_dir)
    drivers: list[subprocess.Popen] = []
    try:
        # 1. Ctrl-C (SIGINT to the whole foreground group): cancels, exits 130, leaves no process.
        drivers.append(driver := start(config))
        wait_finished(store, 1, driver)
        ignored = ignored_signals(driver.pid)
        os.killpg(driver.pid, signal.SIGINT)
        output, _ = driver.communicate(timeout=60)
        print(output)  # whole, under "Captured stdout" if this fails (an assertion message is cut)
        assert driver.returncode == 130, f"driver ignores {ignored}, pytest ignores {ignored_signals(os.getpid())}"
        assert "interrupted:" in output and "run the same command again" in output
        deadline = time.monotonic() + 20
        while group_alive(driver.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not group_alive(driver.pid)

        # 2. SIGKILL of the driver alone, after more runs finished (serial this time: the run
        # keys do not depend on the backend, and it saves starting a pool twice more).
        before = len(store.finished_keys())
        assert before < len(study.runs)
        drivers.append(driver := start(config, "--backend", "serial"))
        wait_finished(store, before + 1, driver)
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
        done = {key: store.read_meta(key)["saved_at"] for key in store.finished_keys()}
        assert len(done) < len(study.runs)

        # 3. The same command finishes the rest, without re-running a finished run.
        drivers.append(driver := start(config, "--backend", "serial"))
        output, _ = driver.communicate(timeout=600)
        assert driver.returncode == 0, output[-3000:]
        assert f"{len(study.runs) - len(done)} finished, 0 failed, {len(done)} skipped (already finished)" in output
    finally:
        for process in drivers:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # only groups this test started
            except ProcessLookupError:
                pass
    assert store.finished_keys() == {r.run_key for r in study.runs}
    assert {key: store.read_meta(key)["saved_at"] for key in done} == done
    client = MlflowClient(study.tracking_uri)
    experiment = client.get_experiment_by_name("resume")
    runs = client.search_runs([experiment.experiment_id], "tags.role = 'run'")
    finished = [r.data.tags["run_key"] for r in runs if r.info.status == "FINISHED"]
    assert sorted(finished) == sorted(r.run_key for r in study.runs)  # each exactly once
    [parent] = client.search_runs([experiment.experiment_id], "tags.role = 'study'")
    assert parent.info.status == "FINISHED"
    assert json.loads((study.output_dir / "study.json").read_text())["name"] == "resume"
