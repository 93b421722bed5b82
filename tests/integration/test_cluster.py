"""The study runner against real servers: a two-node Ray cluster (Jobs API, token auth) and an
`mlflow server`, all on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from tests.support.local_servers import processes
from wdrbo_dist.run.records import deterministic_part
from wdrbo_dist.study.config import load_study_config
from wdrbo_dist.run.spec import RunResult, RunSpec
from wdrbo_dist.run.loop import run_one
from wdrbo_dist.storage.store import ResultStore

pytestmark = pytest.mark.integration

CLI = str(Path(sys.executable).with_name("wdrbo-dist"))
FAST = {"raw_samples": 32, "num_restarts": 2}


def write_study(path: Path, name: str, tracking_uri: str, output_dir: Path, evaluations: int = 7,
                seeds: list[int] | None = None, algorithms: list[str] | None = None) -> Path:
    path.write_text(yaml.safe_dump({
        "name": name, "problems": ["three-hump-camel", "newsvendor"],
        "algorithms": [{"name": a, "options": FAST} for a in (algorithms or ["erbo", "gp-ucb"])],
        "seeds": seeds or [0, 1], "evaluations": evaluations, "init_size": 5, "backend": "ray", "workers": 2,
        "tracking_uri": tracking_uri, "output_dir": str(output_dir),
    }))
    return path


def finished_once(uri: str, study_name: str) -> dict[str, list[str]]:
    """run_key -> the statuses of its child runs in the tracking server."""
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(study_name)
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.role = 'run'", max_results=1000)
    statuses: dict[str, list[str]] = {}
    for run in runs:
        statuses.setdefault(run.data.tags["run_key"], []).append(run.info.status)
    return statuses


def run_here(spec: RunSpec, threads: int) -> RunResult:
    """`spec` run in this process with `threads` torch threads, as a worker runs it."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return run_one(spec)
    finally:
        torch.set_num_threads(before)


def test_a_study_submitted_as_a_ray_job_is_found_in_the_store_and_the_server(ray_cluster, mlflow_server, tmp_path):
    workdir = tmp_path / "project"
    (workdir / ".venv").mkdir(parents=True)
    (workdir / ".venv" / "huge.bin").write_bytes(os.urandom(1024))  # never uploaded
    (tmp_path / "elsewhere").mkdir()  # the config is not in the uploaded folder: it travels with the job
    config = write_study(tmp_path / "elsewhere" / "study.yaml", "jobs", mlflow_server.uri, tmp_path / "out",
                         algorithms=["gp-ucb"])
    out = subprocess.run(
        [CLI, "submit", str(config), "--address", ray_cluster.dashboard_url, "--working-dir", str(workdir)],
        env=ray_cluster.env, capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "SUCCEEDED" in out.stdout and "study jobs: 4 runs; this command: 4 finished, 0 failed" in out.stdout
    # Ray's packaging notices are in the log named at the end, not on the terminal.
    assert "packag" not in out.stderr.lower() and "packag" not in out.stdout.lower(), out.stderr
    log = Path(out.stderr.splitlines()[-1].removeprefix("library messages (Ray, MLflow): "))
    assert "packag" in log.read_text().lower()
    study = load_study_config(config)
    store = ResultStore(study.output_dir)
    keys = {r.run_key for r in study.runs}
    assert store.finished_keys() == keys
    statuses = finished_once(mlflow_server.uri, "jobs")
    assert set(statuses) == keys and all(s == ["FINISHED"] for s in statuses.values())
    # The upload: the config went (written into the unpacked folder on the cluster), the .venv did not.
    unpacked = [p for p in ray_cluster.root.rglob(".wdrbo-submitted-study.yaml") if "working_dir_files" in p.parts]
    assert unpacked and unpacked[0].read_text() == config.read_text(), "the config is not in the job's folder"
    assert not list(ray_cluster.root.rglob("huge.bin"))
    # The cluster's records are the driver's: the same spec gives the same records anywhere, bit
    # for bit, when it runs with the same number of torch threads (a run gets its resources'
    # CPUs; with more, torch's parallel sums round the QMC expectation differently in the last bit).
    for spec in study.runs[:2]:
        local = run_here(spec, threads=study.resources(spec.algorithm).threads)
        pd.testing.assert_frame_equal(deterministic_part(store.read_records(spec.run_key)), deterministic_part(local.records), check_exact=True)


def _task_processes(cluster) -> list[tuple[int, str, float]]:
    """(pid, label, age in s) of our cluster's Ray workers that are running one of our runs now."""
    table = processes()
    ticks = os.sysconf("SC_CLK_TCK")
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    found = []
    for pid, (_, cmdline, start) in table.items():
        if not cmdline.startswith("ray::run "):
            continue
        ancestor = pid
        while ancestor in table and ancestor not in cluster.pids and ancestor > 1:
            ancestor = table[ancestor][0]
        if ancestor in cluster.pids:
            found.append((pid, cmdline[len("ray::run ") :], uptime - start / ticks))
    return found


def test_a_killed_worker_is_retried_and_every_run_finishes_once(ray_cluster, mlflow_server, tmp_path):
    config = write_study(tmp_path / "study.yaml", "killed", mlflow_server.uri, tmp_path / "out",
                         evaluations=14, seeds=[0, 1, 2], algorithms=["erbo"])
    driver = subprocess.Popen(
        [CLI, "run", str(config), "--address", ray_cluster.gcs_address, "--quiet"],
        env=ray_cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    killed: tuple[int, str] | None = None
    try:
        deadline = time.monotonic() + 300
        while killed is None and driver.poll() is None and time.monotonic() < deadline:
            for pid, label, age_s in _task_processes(ray_cluster):
                if age_s > 1.0:
                    os.kill(pid, signal.SIGKILL)  # a worker of the cluster this test started
                    killed = (pid, label)
                    break
            time.sleep(0.2)
        output, _ = driver.communicate(timeout=600)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert killed is not None, f"no run was seen running: {output[-2000:]}"
    assert driver.returncode == 0, output[-3000:]
    study = load_study_config(config)
    store = ResultStore(study.output_dir)
    assert store.finished_keys() == {r.run_key for r in study.runs}
    statuses = finished_once(mlflow_server.uri, "killed")
    assert all(s.count("FINISHED") == 1 for s in statuses.values()) and len(statuses) == len(study.runs)
    # The killed run was run again, by another process (Ray's retry), and finished.
    pid, label = killed
    [spec] = [s for s in study.runs if s.label in label]
    meta = store.read_meta(spec.run_key)
    assert meta["status"] == "FINISHED" and meta["pid"] != pid


def test_sigterm_to_a_driver_on_a_cluster_ends_its_runs_there_and_leaves_the_cluster_up(ray_cluster, tmp_path):
    """`kill PID` to a driver joined to a cluster mid-run: exit 143, the finished runs stored, and
    within seconds no worker of the cluster still runs one of its runs (Ray ends a finished
    job's tasks: the driver does not cancel them, which can crash it in a check of Ray's when a
    task completes as it is cancelled). The cluster stays up for the next driver."""
    config = write_study(tmp_path / "study.yaml", "ended", "none", tmp_path / "out", evaluations=150,
                         seeds=list(range(6)), algorithms=["gp-ucb"])
    driver = subprocess.Popen(
        [CLI, "run", str(config), "--address", ray_cluster.gcs_address, "--quiet"],
        env=ray_cluster.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while len(_task_processes(ray_cluster)) < 2 and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert driver.poll() is None and _task_processes(ray_cluster), "no run was seen running"
        driver.send_signal(signal.SIGTERM)
        output, _ = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert driver.returncode == 143, output[-3000:]
    assert "interrupted:" in output
    deadline = time.monotonic() + 15
    while _task_processes(ray_cluster) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _task_processes(ray_cluster), "the driver's runs went on without it"
    assert all(process.poll() is None for process in ray_cluster.processes), "the cluster went down"
