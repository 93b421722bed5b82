"""What `submit` sends to the Jobs API: the command the head runs, and the config with it."""

from __future__ import annotations

import os
import subprocess

import pytest

from wdrbo_dist.execution.submit import UPLOADED_CONFIG_ENV, SubmitError, check_durable, job_command

CONFIG = "name: s\nproblems: [ackley]\nalgorithms: [erbo]\n# a 'quote', a \"double\" and a $dollar\n"


def test_a_config_inside_the_working_folder_is_named_by_its_path_there(tmp_path) -> None:
    (tmp_path / "configs").mkdir()
    config = tmp_path / "configs" / "s.yaml"
    config.write_text(CONFIG)
    entrypoint, config_rel, env = job_command(config, tmp_path, 3, ["--quiet"])
    assert config_rel == "configs/s.yaml" and env == {}
    assert entrypoint == "python -m wdrbo_dist.cli run configs/s.yaml --backend ray --address auto --workers 3 --quiet"


def test_a_config_outside_travels_with_the_job_and_is_written_byte_for_byte(tmp_path) -> None:
    workdir, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    workdir.mkdir()
    elsewhere.mkdir()
    (elsewhere / "s.yaml").write_text(CONFIG)
    entrypoint, config_rel, env = job_command(elsewhere / "s.yaml", workdir, None, [])
    assert env == {UPLOADED_CONFIG_ENV: CONFIG}
    write, run = entrypoint.split(" && ")
    assert run == f"python -m wdrbo_dist.cli run {config_rel} --backend ray --address auto"
    # The head runs the entrypoint in a shell, in the unpacked folder, with the job's env vars.
    subprocess.run(["/bin/sh", "-c", write], cwd=workdir, env={**os.environ, **env}, check=True)
    assert (workdir / config_rel).read_text() == CONFIG


@pytest.mark.parametrize("raw, message", [
    ({}, "output_dir: left out (results/<name> by default); on the cluster it would be inside Ray's temporary job folder"),
    ({"output_dir": "results/x"}, "output_dir: relative ('results/x')"),
    ({"output_dir": "~/results"}, "output_dir: relative ('~/results')"),
    ({"output_dir": "/shared/x"}, "tracking_uri: left out (sqlite:///mlflow.db by default)"),
    ({"output_dir": "/shared/x", "tracking_uri": "sqlite:///m.db"}, "tracking_uri: relative ('sqlite:///m.db')"),
])
def test_submit_refuses_a_place_inside_the_jobs_temporary_folder(raw, message) -> None:
    with pytest.raises(SubmitError) as refused:
        check_durable(raw)
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


@pytest.mark.parametrize("uri", ["none", "http://head:5000", "sqlite:////shared/mlflow.db"])
def test_submit_takes_absolute_places_and_servers(uri) -> None:
    check_durable({"output_dir": "/shared/x", "tracking_uri": uri})
