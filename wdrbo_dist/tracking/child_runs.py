"""A run's MLflow child run: its name, tags, params, per-step and run metrics, and records.

In worker mode (an `mlflow server`) each worker logs its own child run right after the run
(`WorkerTracking`, the hook the driver hands the backend) and leaves it RUNNING; in driver mode
the driver logs it. Either way the driver ends it once the store holds the result.
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wdrbo_dist import __version__
from wdrbo_dist.run.spec import RunResult, RunSpec
from wdrbo_dist.tracking.connection import (
    BATCH, FAILED, FINISHED, TrackingError, apply_client_settings, chunks, mlflow_client, server_answers,
)

if TYPE_CHECKING:
    from mlflow.store.artifact.artifact_repo import ArtifactRepository
    from mlflow.tracking import MlflowClient

STEP_METRICS = (
    "regret", "cumulative_regret", "regret_reference", "cumulative_regret_reference", "best_y",
    "time_step_s", "time_fit_s", "time_acquisition_s",
)


def run_tags(spec: RunSpec, parent_run_id: str | None, result: RunResult | None = None) -> dict[str, str]:
    tags = {
        "role": "run",
        "run_key": spec.run_key,
        "study": spec.study,
        "problem": spec.problem,
        "algorithm": spec.algorithm,
        "seed": str(spec.seed),
        "fidelity": spec.fidelity,
        "evaluations": str(spec.evaluations),
        "init_size": str(spec.init_size),
        "device": spec.device,
        "variant": spec.algorithm_label,
        "version": __version__,
        "mlflow.runName": spec.label,
    }
    if parent_run_id:
        tags["mlflow.parentRunId"] = parent_run_id
    if result is not None:
        tags["host"] = result.host
    return tags


def run_metrics(result: RunResult) -> list[tuple[str, float, int]]:
    """(key, value, step) of every per-step and run-level metric of a result."""
    out: list[tuple[str, float, int]] = []
    records = result.records
    if records is not None and not records.empty:
        steps = records["step"].astype(int).tolist()
        for column in STEP_METRICS:
            if column in records:
                out.extend((column, float(v), s) for v, s in zip(records[column].tolist(), steps))
    for key, value in result.summary().items():
        if key == "best_y":
            key = "final_best_y"
        elif key.startswith(("time_", "inner_")):
            key = f"total_{key}"
        out.append((key, float(value), 0))
    # MLflow stores NaN but not +-inf in every backend; keep the finite ones and NaN.
    return [(k, v, s) for k, v, s in out if math.isnan(v) or math.isfinite(v)]


def log_child_run(
    client: "MlflowClient",
    experiment_id: str,
    parent_run_id: str | None,
    result: RunResult,
    records_file: Path | None = None,
) -> str:
    """Create the child run of `result`, log everything but its end; returns its run id.

    `records_file` is the parquet to attach; without it a temporary copy is written.
    The run is left RUNNING: `finish_child_run` ends it once the store holds the result.
    """
    from mlflow.entities import Metric, Param

    spec = result.spec
    tags = run_tags(spec, parent_run_id, result)
    run = client.create_run(
        experiment_id,
        start_time=int((result.started_at or time.time()) * 1000),
        tags=tags,
        run_name=spec.label,
    )
    run_id = run.info.run_id
    used = result.options or spec.options_dict  # a run that failed before resolving: what was given
    params = [Param(str(k), str(v)) for k, v in sorted(used.items())]
    params += [Param("evaluations", str(spec.evaluations)), Param("init_size", str(spec.init_size)),
               Param("fidelity", spec.fidelity)]
    now = int(time.time() * 1000)
    metrics = [Metric(k, v, now, s) for k, v, s in run_metrics(result)]
    # One call for a run's params and metrics where they fit (a run of 100 evaluations: ~820
    # entities): at 10^4 runs each request saved is minutes of a server's time.
    if len(params) <= 100 and len(params) + len(metrics) <= BATCH:
        client.log_batch(run_id, params=params, metrics=metrics)
    else:
        for chunk in chunks(params, 100):
            client.log_batch(run_id, params=chunk)
        for chunk in chunks(metrics, BATCH):
            client.log_batch(run_id, metrics=chunk)
    if result.ok and result.records is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "records.parquet"  # the same artifact name for every run
            if records_file is not None and Path(records_file).is_file():  # else compacted since
                path.symlink_to(Path(records_file).resolve())
            elif result.records_parquet is not None:
                path.write_bytes(result.records_parquet)
            else:
                result.records.to_parquet(path, index=False)
            # To the run's artifact location as create_run returned it: `client.log_artifact`
            # would ask the server for the run first (a request, ~15 % of a server's time a run).
            artifacts(run.info.artifact_uri, client.tracking_uri).log_artifact(str(path))
    if result.error:
        client.set_tag(run_id, "error", result.error.strip().splitlines()[-1][:500])
        client.log_text(run_id, result.error, "traceback.txt")
    return run_id


def artifacts(artifact_uri: str, tracking_uri: str) -> "ArtifactRepository":
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

    return get_artifact_repository(artifact_uri, tracking_uri=tracking_uri)


def finish_child_run(client: "MlflowClient", run_id: str, result: RunResult) -> None:
    client.set_terminated(run_id, status=FINISHED if result.ok else FAILED)


# A worker whose last run logged a moment ago does not probe the server before the next: at
# 10^4-10^5 short runs the probes were a request a run.
TRUST_S = 2.0
_logged_at: dict[str, float] = {}  # tracking URI -> when this process last logged a run there


@dataclass(frozen=True)
class WorkerTracking:
    """What a worker needs to log its own child run (worker mode): plain, picklable values."""

    uri: str
    experiment_id: str
    parent_run_id: str

    def log(self, result: RunResult) -> str:
        """Log the child run; a server that does not answer costs one quick probe, not the
        retries of every call (the driver logs the run itself, now or when the server is back).
        The probe is skipped while this process's last run logged less than `TRUST_S` ago."""
        apply_client_settings()
        if time.monotonic() - _logged_at.get(self.uri, -math.inf) > TRUST_S and not server_answers(self.uri):
            raise TrackingError(f"tracking_uri {self.uri}: the server does not answer")
        _logged_at.pop(self.uri, None)  # until this run is logged: a failure probes next time
        run_id = log_child_run(mlflow_client(self.uri), self.experiment_id, self.parent_run_id, result)
        _logged_at[self.uri] = time.monotonic()
        return run_id

    __call__ = log  # the backends call it as an opaque hook on each result, where the run ran

