"""jobs/kubernetes/rayjob.yaml: a KubeRay RayJob whose entrypoint runs the study on the cluster
KubeRay starts. The manifest is parsed as Kubernetes would read it, and its entrypoint's command
runs here against a real Ray cluster (as KubeRay runs it: RAY_ADDRESS set, `--address auto`)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.study.config import load_study_config

MANIFEST = Path(__file__).resolve().parents[2] / "jobs" / "kubernetes" / "rayjob.yaml"


def documents() -> dict[str, dict]:
    return {doc["kind"]: doc for doc in yaml.safe_load_all(MANIFEST.read_text())}


def test_the_manifest_is_a_rayjob_whose_study_is_valid(tmp_path):
    docs = documents()
    job = docs["RayJob"]
    assert job["apiVersion"] == "ray.io/v1"
    assert job["spec"]["shutdownAfterJobFinishes"] is True
    assert "--backend ray --address auto" in job["spec"]["entrypoint"]
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    mounts = {m["mountPath"]: m["name"] for m in head["containers"][0]["volumeMounts"]}
    assert mounts == {"/config": "study", "/data": "data"}  # the study file, the shared store
    for group in [head, *(g["template"]["spec"] for g in job["spec"]["rayClusterSpec"]["workerGroupSpecs"])]:
        env = {e["name"]: e for e in group["containers"][0]["env"]}
        assert "secretKeyRef" in env["MLFLOW_TRACKING_PASSWORD"]["valueFrom"]  # credentials from a Secret only
    study = tmp_path / "study.yaml"
    study.write_text(docs["ConfigMap"]["data"]["study.yaml"])
    spec = load_study_config(study)
    assert str(spec.output_dir).startswith("/data/")  # on the volume every pod mounts


@pytest.mark.integration
def test_the_entrypoint_runs_the_study_on_a_ray_cluster(ray_cluster, tmp_path):
    docs = documents()
    study = yaml.safe_load(docs["ConfigMap"]["data"]["study.yaml"])
    # the manifest's study, made small: 2 runs, no tracking server, the store under tmp_path
    study.update(problems=["three-hump-camel"], algorithms=["random", "gp-ucb"], seeds=[0], evaluations=6,
                 init_size=3, workers=1, tracking_uri="none", output_dir=str(tmp_path / "data" / "results"))
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "study.yaml").write_text(yaml.safe_dump(study))
    command = shlex.split(docs["RayJob"]["spec"]["entrypoint"].replace("/config/", f"{tmp_path}/config/"))
    assert command[0] == "python"
    env = dict(ray_cluster.env, RAY_ADDRESS=ray_cluster.gcs_address)  # what KubeRay sets for a job
    done = subprocess.run([sys.executable, *command[1:]], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    spec = load_study_config(tmp_path / "config" / "study.yaml")
    assert ResultStore(spec.output_dir).finished_keys() == {run.run_key for run in spec.runs}
