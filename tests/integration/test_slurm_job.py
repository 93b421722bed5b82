"""jobs/slurm/study.sbatch on stand-ins for Slurm: two "nodes" on 127.0.0.1 (a Ray head and a
worker, token authentication on), the runner as the driver with --address auto. A study
finishes in the store and the job leaves no Ray process; SIGTERM (scancel) ends it with exit
143, Ray stopped, and submitting it again runs only what is left."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.local_servers import free_port
from tests.support.processes import living
from tests.support.slurm_standins import write_standins
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.study.config import load_study_config

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "jobs" / "slurm" / "study.sbatch"

STUDY = """
name: slurm_job
problems: [three-hump-camel]
algorithms: [random, {{name: gp-ucb, options: {{num_restarts: 2, raw_samples: 32}}}}]
seeds: {{start: 0, count: 4}}
evaluations: {evaluations}
init_size: 3
workers: 2
tracking_uri: none
output_dir: {output}
"""


def _ray_processes(root: Path) -> list[int]:
    """The processes whose command line names the job's Ray folders (its nodes' processes)."""
    found = []
    for pid in living():
        try:
            if str(root).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


@pytest.mark.integration
def test_a_slurm_job_runs_a_study_on_two_nodes_and_resumes_after_scancel(tmp_path):
    root = Path(f"/tmp/wdrsl{secrets.token_hex(3)}")  # short: Ray's socket paths have a length limit
    write_standins(tmp_path / "bin", root)
    config = tmp_path / "study.yaml"
    output = tmp_path / "results"
    config.write_text(STUDY.format(evaluations=25, output=output))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SLURM_"))}
    env.update(PATH=f"{tmp_path / 'bin'}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
               WDRBO_PYTHON=sys.executable, RAY_PORT=str(free_port()), RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN=secrets.token_hex(16), OMP_NUM_THREADS="1")
    command = ["sbatch", "--nodes=2", str(SCRIPT), str(config), "--quiet"]
    study = load_study_config(config)
    try:
        # scancel mid-study: SIGTERM to the batch script, as Slurm sends it
        job = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)
        deadline = time.monotonic() + 240
        while not list(output.glob("runs/**/*.json")) and time.monotonic() < deadline and job.poll() is None:
            time.sleep(0.5)
        assert job.poll() is None, job.communicate()[0][-3000:]
        job.send_signal(signal.SIGTERM)
        log = job.communicate(timeout=120)[0]
        # Ray's own `ray start` chatter left out, so that a failure shows the driver's last words
        driver_lines = "\n".join(line for line in log.splitlines() if " INFO scripts.py:" not in line)
        assert job.returncode == 143, driver_lines[-4000:]
        assert "study ended with exit code 143" in log
        _wait_gone(root)
        done_before = len(ResultStore(output).finished_keys())
        assert 1 <= done_before < len(study.runs)

        # submitted again: the rest of the study, on a fresh cluster
        finished = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        assert finished.returncode == 0, (finished.stdout + finished.stderr)[-3000:]
        assert f"{done_before} skipped (already finished)" in finished.stdout
        assert ResultStore(output).finished_keys() >= {spec.run_key for spec in study.runs}
        _wait_gone(root)
    finally:
        for pid in _ray_processes(root):
            os.kill(pid, signal.SIGKILL)
        subprocess.run(["rm", "-rf", str(root)], check=False)


def _wait_gone(root: Path, timeout_s: float = 30.0) -> None:
    """Every Ray process of the job ends with it (the nodes' `ray start --block` steps stop theirs)."""
    deadline = time.monotonic() + timeout_s
    while _ray_processes(root) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _ray_processes(root), f"left running: {_ray_processes(root)}"
