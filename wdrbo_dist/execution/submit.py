"""Submit a whole study to a Ray cluster through the Ray Jobs API.

The driver then runs on the cluster's head node (`wdrbo-dist run CONFIG --backend ray --address
auto`), so a laptop can disconnect. The working folder is uploaded without `.venv`, `.git` and
results; a config outside it travels in the job's environment. A relative or default
`output_dir` or `tracking_uri` is refused before any upload (on the cluster it would name Ray's
temporary job folder). The Ray token comes from the submitting machine's usual places. No
credential travels with the job: Ray hands a job's runtime_env, in clear, to every client of the
cluster; the nodes hold the tracking server's credentials in their own environment (jobs/README.md).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path

from wdrbo_dist.errors import one_line, redact

UPLOAD_EXCLUDES = [
    ".venv", ".git", "results", "mlruns", "mlflow.db", "__pycache__", "*.egg-info",
    ".pytest_cache", "dashboards/*/", "*.parquet",
]
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


UPLOADED_CONFIG_ENV = "WDRBO_STUDY_CONFIG"
# Never sent with a job (see the module docstring): the cluster's nodes set them themselves.
CREDENTIAL_ENV = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN")
def _short(value: object) -> str:
    text = redact(repr(value))
    return text if len(text) <= 80 else text[:77] + "..."


class SubmitError(RuntimeError):
    """The job could not be submitted (bad address, auth, unreadable config)."""


def check_durable(raw: dict) -> None:
    """Raise `SubmitError` (one line naming the field) unless the study file names absolute
    places for its results and its tracking store (or `tracking_uri: none` / a server)."""
    output_dir = raw.get("output_dir")
    if not (isinstance(output_dir, str) and output_dir.strip().startswith("/")):
        given = "left out (results/<name> by default)" if output_dir is None else f"relative ({_short(output_dir)})"
        raise SubmitError(f"output_dir: {given}; on the cluster it would be inside Ray's temporary job folder, "
                          "which Ray deletes: give an absolute path every node reaches, e.g. /shared/results/<name>")
    uri = raw.get("tracking_uri", "sqlite:///mlflow.db")
    text = uri.strip() if isinstance(uri, str) else uri
    if isinstance(text, str) and text.startswith("sqlite:///") and not text.startswith("sqlite:////"):
        given = ("left out (sqlite:///mlflow.db by default)" if "tracking_uri" not in raw
                 else f"relative ({_short(uri)})")
        raise SubmitError(f"tracking_uri: {given}; on the cluster it would be inside Ray's temporary job folder: "
                          "give http(s)://HOST:PORT of an MLflow server, sqlite:////ABSOLUTE/PATH or none")


def job_command(config: Path, working_dir: Path, workers: int | None, extra: list[str]) -> tuple[str, str, dict[str, str]]:
    """(entrypoint, config path inside the job's folder, environment the config needs).

    Ray runs the entrypoint in a shell, in the unpacked working folder.
    """
    env: dict[str, str] = {}
    try:
        config_rel = str(config.resolve().relative_to(working_dir.resolve()))
        prefix = ""
    except ValueError:
        config_rel = f".wdrbo-submitted-{config.name}"
        try:
            env[UPLOADED_CONFIG_ENV] = config.read_text()
        except OSError as exc:
            raise SubmitError(f"CONFIG {config}: {exc.strerror or exc}") from None
        prefix = f'printf %s "${UPLOADED_CONFIG_ENV}" > {shlex.quote(config_rel)} && '
    parts = ["python", "-m", "wdrbo_dist.cli", "run", config_rel, "--backend", "ray", "--address", "auto"]
    if workers:
        parts += ["--workers", str(workers)]
    return prefix + " ".join(shlex.quote(p) for p in parts + extra), config_rel, env


def job_runtime_env(working_dir: Path, config_env: dict[str, str]) -> dict:
    """The job's runtime_env: the folder to upload and the few variables the job needs, no credential."""
    return {
        "working_dir": str(working_dir),
        "excludes": UPLOAD_EXCLUDES,
        "env_vars": {"RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1", **config_env},
    }


def submit_study(
    config: Path,
    address: str,
    study_name: str,
    working_dir: Path,
    workers: int | None = None,
    extra_args: list[str] | None = None,
    wait: bool = True,
    echo: Callable[[str], None] = print,
) -> tuple[str, str]:
    """Submit the study and (with `wait`) stream its logs; returns (job id, final status)."""
    from ray.job_submission import JobSubmissionClient

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    working_dir = working_dir.resolve()
    entrypoint, config_rel, config_env = job_command(config, working_dir, workers, extra_args or [])
    shown = redact(address)
    try:
        client = JobSubmissionClient(address)
    except Exception as exc:  # noqa: BLE001 - connection, auth, version: one line for the user
        raise SubmitError(f"--address {shown}: {one_line(exc)}") from None
    submission_id = f"wdrbo-{study_name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    job_id = client.submit_job(
        entrypoint=entrypoint,
        submission_id=submission_id,
        runtime_env=job_runtime_env(working_dir, config_env),
        metadata={"study": study_name, "config": config_rel},
    )
    echo(f"submitted job {job_id} to {shown} (study {study_name})")
    local = [name for name in CREDENTIAL_ENV if os.environ.get(name)]
    if local:
        echo(f"{', '.join(local)}: set here, not sent with the job (Ray shows a job's settings to every client); "
             "the cluster's nodes need them in their own environment (jobs/README.md)")
    if not wait:
        return job_id, str(client.get_job_status(job_id)).split(".")[-1]
    try:
        asyncio.run(_tail(client, job_id, echo))
    except KeyboardInterrupt:
        echo(f"stopped following; the job keeps running. Stop it with: ray job stop --address {shown} {job_id}")
        return job_id, "RUNNING"
    status = _wait_terminal(client, job_id)
    return job_id, status


async def _tail(client, job_id: str, echo: Callable[[str], None]) -> None:
    async for chunk in client.tail_job_logs(job_id):
        for line in chunk.splitlines():
            echo(line)


def _wait_terminal(client, job_id: str, timeout_s: float = 60.0) -> str:
    deadline = time.monotonic() + timeout_s
    status = str(client.get_job_status(job_id))
    while status.split(".")[-1] not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.5)
        status = str(client.get_job_status(job_id))
    return status.split(".")[-1]
