"""What the runner refuses before any work, against real servers on 127.0.0.1: a `submit` whose
results would land in Ray's temporary job folder, a run that no node of the cluster can place;
and the session's MLflow server, behind MLflow's basic-auth app: refused without credentials,
reached with them from the environment by the driver and by the Ray workers."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest
import requests
import yaml
from mlflow.tracking import MlflowClient

from wdrbo_dist.study.config import load_study_config
from wdrbo_dist.storage.store import ResultStore

from test_cluster import CLI, FAST, write_study

pytestmark = pytest.mark.integration


def _jobs(cluster) -> list[dict]:
    """The jobs the head knows (the Jobs API, with the cluster's token)."""
    response = requests.get(f"{cluster.dashboard_url}/api/jobs/", timeout=30,
                            headers={"Authorization": f"Bearer {cluster.env['RAY_AUTH_TOKEN']}"})
    response.raise_for_status()
    return response.json()


@pytest.mark.parametrize("missing, field", [("output_dir", "output_dir"), ("tracking_uri", "tracking_uri")])
def test_submit_refuses_results_inside_rays_temporary_job_folder(ray_cluster, mlflow_server, tmp_path, missing,
                                                                 field):
    name = f"temp-{missing.replace('_', '-')}"
    config = write_study(tmp_path / "study.yaml", name, mlflow_server.uri, tmp_path / "out")
    data = yaml.safe_load(config.read_text())
    data.pop(missing)  # the default: results/<name> or sqlite:///mlflow.db, relative to the job's folder
    config.write_text(yaml.safe_dump(data))
    before = len(_jobs(ray_cluster))
    out = subprocess.run([CLI, "submit", str(config), "--address", ray_cluster.dashboard_url,
                          "--working-dir", str(tmp_path)],
                         env=ray_cluster.env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and f": {field}: left out" in lines[0] and "Ray's temporary job folder" in lines[0], lines
    assert out.stdout == ""
    jobs = _jobs(ray_cluster)
    assert len(jobs) == before and not [j for j in jobs if (j.get("metadata") or {}).get("study") == name]
    assert not (tmp_path / "out").exists() and not (tmp_path / "results").exists()


def test_a_run_no_node_can_place_is_one_line_and_exit_2_before_any_run(ray_cluster, mlflow_server, tmp_path):
    config = write_study(tmp_path / "study.yaml", "too-big", "none", tmp_path / "out", algorithms=["gp-ucb"])
    data = yaml.safe_load(config.read_text())
    data["algorithms"].append({"name": "erbo", "options": FAST, "resources": {"num_cpus": 2}})  # nodes have 1
    config.write_text(yaml.safe_dump(data))
    out = subprocess.run([CLI, "run", str(config), "--address", ray_cluster.gcs_address, "--quiet"],
                         env=ray_cluster.env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "algorithm erbo: resources.num_cpus 2 (the largest node has 1) fits no node of the Ray cluster" in lines[0]
    study = load_study_config(config)
    assert ResultStore(study.output_dir).finished_keys() == set()
    assert not (study.output_dir / "study.json").exists() and not (study.output_dir / "runs").exists()


def test_a_shared_mlflow_server_with_basic_auth_takes_credentials_from_the_environment(mlflow_server, tmp_path):
    server = mlflow_server
    config = write_study(tmp_path / "study.yaml", "guarded", server.uri, tmp_path / "out", algorithms=["gp-ucb"],
                         seeds=[0])
    # The runner's own Ray (token auth on); its workers inherit the driver's environment.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_TRACKING_"))}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16))
    search = f"{server.uri}/api/2.0/mlflow/experiments/search?max_results=1"
    assert requests.get(search, timeout=30).status_code == 401  # the server refuses requests without credentials
    # ... and with a wrong password, though it keeps good logins a while (its auth cache)
    assert requests.get(search, auth=("admin", server.admin_password), timeout=30).status_code == 200
    assert requests.get(search, auth=("admin", server.admin_password + "x"), timeout=30).status_code == 401

    refused = subprocess.run([CLI, "run", str(config), "--quiet"], env=env, capture_output=True, text=True,
                             timeout=300)
    assert refused.returncode == 2, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert len(refused.stderr.strip().splitlines()) == 1 and "tracking_uri" in refused.stderr, refused.stderr
    assert not list((tmp_path / "out").glob("runs/*.parquet"))

    env.update(server.credentials)
    out = subprocess.run([CLI, "run", str(config), "--quiet"], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "could not log to mlflow" not in out.stdout + out.stderr  # the workers logged their runs themselves
    study = load_study_config(config)
    keys = {r.run_key for r in study.runs}
    assert ResultStore(study.output_dir).finished_keys() == keys
    client = MlflowClient(server.uri)
    experiment = client.get_experiment_by_name("guarded")
    runs = client.search_runs([experiment.experiment_id], filter_string="tags.role = 'run'")
    assert {r.data.tags["run_key"]: r.info.status for r in runs} == {key: "FINISHED" for key in keys}
    assert all(r.data.tags.get("host") for r in runs)
