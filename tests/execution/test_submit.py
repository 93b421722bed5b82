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


SECRET = "s3cret-password"


@pytest.fixture()
def credentials(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "admin")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", SECRET)
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", SECRET + "-token")


def test_the_jobs_runtime_env_carries_no_credential(tmp_path, credentials) -> None:
    """Ray returns a job's runtime_env in clear to any client as long as it keeps the job."""
    from wdrbo_dist.execution.submit import job_runtime_env

    env = job_runtime_env(tmp_path, {UPLOADED_CONFIG_ENV: CONFIG})
    text = repr(env)
    assert SECRET not in text and "MLFLOW_TRACKING" not in text
    assert env["working_dir"] == str(tmp_path) and env["env_vars"][UPLOADED_CONFIG_ENV] == CONFIG


class FakeClient:
    """What `submit_study` hands to Ray's JobSubmissionClient, kept for the test to read."""

    submitted: list[dict] = []

    def __init__(self, address: str) -> None:
        self.address = address

    def submit_job(self, **kwargs) -> str:
        FakeClient.submitted.append(kwargs)
        return kwargs["submission_id"]

    def get_job_status(self, job_id: str) -> str:
        return "JobStatus.PENDING"


def test_submit_sends_no_credential_and_says_where_they_come_from(tmp_path, credentials, monkeypatch) -> None:
    import ray.job_submission

    from wdrbo_dist.execution.submit import submit_study

    monkeypatch.setattr(ray.job_submission, "JobSubmissionClient", FakeClient)
    FakeClient.submitted.clear()
    config = tmp_path / "s.yaml"
    config.write_text(CONFIG)
    lines: list[str] = []
    job_id, status = submit_study(config, "http://user:pw-in-url@head:8265", "s", tmp_path, wait=False,
                                  echo=lines.append)
    [sent] = FakeClient.submitted
    assert SECRET not in repr(sent) and "pw-in-url" not in repr(sent)
    assert status == "PENDING"
    assert SECRET not in "\n".join(lines) and "pw-in-url" not in "\n".join(lines)
    assert any("not sent with the job" in line and "jobs/README.md" in line for line in lines), lines


def test_an_address_with_credentials_is_redacted_in_the_error(tmp_path, monkeypatch) -> None:
    import ray.job_submission

    from wdrbo_dist.execution.submit import submit_study

    def refuse(address: str):
        raise ConnectionError(f"Failed to connect to {address}")

    monkeypatch.setattr(ray.job_submission, "JobSubmissionClient", refuse)
    config = tmp_path / "s.yaml"
    config.write_text(CONFIG)
    with pytest.raises(SubmitError) as refused:
        submit_study(config, "http://user:pw-in-url@head:8265", "s", tmp_path, wait=False, echo=print)
    assert "pw-in-url" not in str(refused.value) and "http://***@head:8265" in str(refused.value)
