"""MLflow tracking: one experiment per study, a parent run holding the config, a child run per run.

The store (parquet) is the canonical data; MLflow is a view of it that the driver keeps in
step: with sqlite only the driver logs (after the run's parquet is durable); with an `mlflow
server` each worker logs its own child run and the driver marks it FINISHED. On every start the
driver logs what the store holds and MLflow lacks. The comment above `StudyTracker` gives the
modes, the reconciliation, a silent server, and the runs' names, tags, params and metrics.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wdrbo_dist import __version__
from wdrbo_dist.mlflow_views import View, comparison_view, study_view, ui_address
from wdrbo_dist.run import RunResult, RunSpec

if TYPE_CHECKING:
    from mlflow.tracking import MlflowClient

    from wdrbo_dist.analysis.report import AggregateCell
    from wdrbo_dist.config import StudySpec
    from wdrbo_dist.store import ResultStore

STEP_METRICS = (
    "regret", "cumulative_regret", "regret_reference", "cumulative_regret_reference", "best_y",
    "time_step_s", "time_fit_s", "time_acquisition_s",
)
BATCH = 1000  # MLflow's limit of entities per log_batch call
FINISHED, FAILED, RUNNING, KILLED = "FINISHED", "FAILED", "RUNNING", "KILLED"
EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"


class TrackingError(RuntimeError):
    """The tracking store cannot be used; the message says which URI and why, in one line."""


def tracking_mode(uri: str) -> str:
    """`worker` for a tracking server workers can reach, `driver` for a local sqlite file."""
    return "worker" if uri.startswith(("http://", "https://")) else "driver"


# MLflow retries a failed HTTP call 7 times over about 4 minutes by default (rate limits of
# hosted servers). A study's own server that stopped answering would then cost minutes per run;
# the store holds every result anyway, so a few seconds of retries is enough. A user's own
# setting of these variables wins.
MLFLOW_CLIENT_SETTINGS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
    # And no "View run ... at ..." line per run on the terminal: a study prints the address of
    # its runs view once, at the end.
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}


PROBE_INTERVAL_S = 15.0  # how often a driver asks a server that stopped answering whether it is back


def apply_client_settings() -> None:
    for name, value in MLFLOW_CLIENT_SETTINGS.items():
        os.environ.setdefault(name, value)


def server_answers(uri: str, timeout_s: float = 2.0) -> bool:
    """One GET /health, without MLflow's retries: is the tracking server up right now?"""
    import requests

    try:
        return requests.get(f"{uri}/health", timeout=timeout_s).status_code == 200
    except requests.RequestException:
        return False


def _client(uri: str) -> "MlflowClient":
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def check_tracking_uri(uri: str, timeout_s: float = 5.0) -> None:
    """Fail fast, before any run, when the store cannot be reached; create a sqlite db.

    Creating the sqlite database here, in the driver, runs MLflow's schema migrations once
    instead of racing them from several processes.
    """
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        try:
            db.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TrackingError(f"tracking_uri {uri}: cannot create folder {db.parent}: {exc.strerror}") from None
        if not os.access(db.parent, os.W_OK):
            raise TrackingError(f"tracking_uri {uri}: folder {db.parent} is not writable")
        try:
            _client(uri).search_experiments(max_results=1)
        except Exception as exc:  # noqa: BLE001 - any failure here means "unusable store"
            raise TrackingError(f"tracking_uri {uri}: cannot open the sqlite store: {_one_line(exc)}") from None
        return
    if uri.startswith(("http://", "https://")):
        import requests

        try:
            response = requests.get(f"{uri}/health", timeout=timeout_s)
        except requests.RequestException as exc:
            raise TrackingError(
                f"tracking_uri {uri}: no MLflow server answers ({type(exc).__name__}); "
                "start one with `mlflow server --host HOST --port PORT` or use tracking_uri: none"
            ) from None
        if response.status_code != 200:
            raise TrackingError(
                f"tracking_uri {uri}: /health answered HTTP {response.status_code}, not an MLflow server?"
            )
        return
    raise TrackingError(f"tracking_uri {uri}: unsupported; use sqlite:///PATH or http(s)://HOST:PORT")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


# --- what a child run holds ------------------------------------------------------------------------


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


def _chunks(items: list, size: int) -> Iterator[list]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


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
    for chunk in _chunks(params, 100):
        client.log_batch(run_id, params=chunk)
    for chunk in _chunks(metrics, BATCH):
        client.log_batch(run_id, metrics=chunk)
    if result.ok and result.records is not None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "records.parquet"  # the same artifact name for every run
            if records_file is not None:
                path.symlink_to(Path(records_file).resolve())
            else:
                result.records.to_parquet(path, index=False)
            client.log_artifact(run_id, str(path))
    if result.error:
        client.set_tag(run_id, "error", result.error.strip().splitlines()[-1][:500])
        client.log_text(run_id, result.error, "traceback.txt")
    return run_id


def finish_child_run(client: "MlflowClient", run_id: str, result: RunResult) -> None:
    client.set_terminated(run_id, status=FINISHED if result.ok else FAILED)


@dataclass(frozen=True)
class WorkerTracking:
    """What a worker needs to log its own child run (worker mode): plain, picklable values."""

    uri: str
    experiment_id: str
    parent_run_id: str

    def log(self, result: RunResult) -> str:
        """Log the child run; a server that does not answer costs one quick probe, not the
        retries of every call (the driver logs the run itself, now or when the server is back)."""
        apply_client_settings()
        if not server_answers(self.uri):
            raise TrackingError(f"tracking_uri {self.uri}: the server does not answer")
        return log_child_run(_client(self.uri), self.experiment_id, self.parent_run_id, result)


# --- lookups shared by the driver and the report ------------------------------------------------------


def search_all(client: "MlflowClient", experiment_id: str, filter_string: str) -> list[Any]:
    """Every run of the experiment that matches, page after page (1000 a page)."""
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], filter_string=filter_string, max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def find_parent_run(client: "MlflowClient", experiment_id: str) -> str | None:
    """The study's parent run (tag role=study; the oldest, as the driver reuses it)."""
    found = client.search_runs([experiment_id], filter_string="tags.role = 'study'", max_results=1,
                               order_by=["attributes.start_time ASC"])
    return found[0].info.run_id if found else None


# --- the driver's side ------------------------------------------------------------------------------


# The store (parquet) is the canonical data; MLflow is a view of it that the driver keeps in
# step. Two modes, chosen from the URI:
#
# - `driver` (sqlite:///...): only the driver talks to the database (sqlite does not like
#   concurrent writers, and cluster nodes cannot see the file). It logs each child run after
#   the run's parquet is durable.
# - `worker` (http(s)://, a real `mlflow server`): each worker logs its own child run right after
#   `run_one` returns and leaves it RUNNING; the driver marks it FINISHED (or FAILED) once the
#   parquet is durable. A worker killed while logging leaves a RUNNING orphan that the driver
#   marks KILLED, so every run is FINISHED exactly once.
#
# On every start the driver reconciles: each finished run of the store without a FINISHED child
# run is logged from the store (a driver killed between store and tracker loses nothing).
# A server that stops answering mid-study costs seconds, not minutes: MLflow's HTTP retries are
# bounded (`MLFLOW_CLIENT_SETTINGS`), a worker probes /health before logging, and the driver keeps
# the results the server missed in a backlog that it logs when the server answers again.
#
# Child runs are named `problem|algorithm|s<seed>` and tagged `role=run`, `run_key`, `study`,
# `problem`, `algorithm`, `seed`, `fidelity`, `evaluations`, `init_size`, `version`, `host`.
# Params: the algorithm's effective options (defaults of the fidelity merged with the study's).
# Per-step metrics (step = evaluation index): regret, cumulative_regret, regret_reference,
# cumulative_regret_reference, best_y, time_step_s, time_fit_s, time_acquisition_s.
# Run metrics: final_cumulative_regret, final_cumulative_regret_reference, final_regret,
# final_best_y, wall_time_s, total_time_fit_s, total_time_acquisition_s, total_time_truth_s,
# total_inner_solve_s, total_inner_solves, total_inner_programs, total_inner_failures. Artifacts: records.parquet (or
# traceback.txt for a failed run). The experiment holds saved views of the MLflow UI
# (`mlflow_views`): the study's runs, and after `report` one comparison per problem.
class StudyTracker:
    """The driver's MLflow view of one study: experiment, parent run, child runs."""

    def __init__(self, uri: str, study_name: str) -> None:
        apply_client_settings()
        self.uri = uri
        # Set when the server stopped answering mid-study; the results it missed wait in
        # `backlog` (with the child run a worker opened, if any) until `answers_again`.
        self.unreachable = False
        self.backlog: list[tuple[RunResult, str | None, Path | None]] = []
        self._probed_at = 0.0
        self.study_name = study_name
        self.mode = tracking_mode(uri)
        self.client = _client(uri)
        self.experiment_id = ""
        self.parent_run_id = ""

    # --- study ---------------------------------------------------------------------------------
    def start(self, study: "StudySpec", config_text: str, extra_params: dict[str, str] | None = None) -> None:
        """Get or create the experiment and the parent run (reused when resuming)."""
        self.experiment_id = self._experiment()
        parent = find_parent_run(self.client, self.experiment_id)
        if parent is not None:
            self.parent_run_id = parent
            self.client.update_run(self.parent_run_id, status=RUNNING)
        else:
            run = self.client.create_run(
                self.experiment_id,
                tags={"role": "study", "study": study.name, "version": __version__,
                      "mlflow.runName": f"study {study.name}"},
                run_name=f"study {study.name}",
            )
            self.parent_run_id = run.info.run_id
            from mlflow.entities import Param

            params = {
                "fidelity": study.fidelity, "evaluations": study.evaluations,
                "init_size": study.init_size, "seeds": ",".join(map(str, study.seeds)),
                "problems": ",".join(study.problems), "algorithms": ",".join(study.algorithms),
                "runs": len(study.runs), **(extra_params or {}),
            }
            self.client.log_batch(self.parent_run_id, params=[Param(k, str(v)[:6000]) for k, v in params.items()])
            self.client.log_text(self.parent_run_id, config_text, "study.yaml")

    def _experiment(self) -> str:
        experiment_id = self._get_or_create_experiment()
        # MLflow 3's UI sorts experiments into GenAI and model-training kinds by this tag (its
        # enum value "custom_model_development"); the saved view is what opens the runs table
        # (see mlflow_views).
        if self.client.get_experiment(experiment_id).tags.get(EXPERIMENT_KIND_TAG) != EXPERIMENT_KIND:
            self.client.set_experiment_tag(experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
        save_view(self.client, experiment_id, study_view(self.study_name))
        return experiment_id

    def runs_address(self) -> str:
        """The address of the study's runs in the MLflow UI (its saved view)."""
        return study_view(self.study_name).address(ui_address(self.uri), self.experiment_id)

    def _get_or_create_experiment(self) -> str:
        from mlflow.entities import LifecycleStage

        experiment = self.client.get_experiment_by_name(self.study_name)
        if experiment is not None:
            if experiment.lifecycle_stage == LifecycleStage.DELETED:
                self.client.restore_experiment(experiment.experiment_id)
            return experiment.experiment_id
        location = None
        if self.uri.startswith("sqlite:///"):
            # Artifacts beside the database, so `mlflow ui` run from anywhere finds them.
            location = (Path(self.uri[len("sqlite:///"):]).parent / "mlruns" / self.study_name).as_uri()
        try:
            return self.client.create_experiment(self.study_name, artifact_location=location)
        except Exception:  # noqa: BLE001 - created meanwhile by another process
            experiment = self.client.get_experiment_by_name(self.study_name)
            if experiment is None:
                raise
            return experiment.experiment_id

    def end(self, status: str, summary: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.parent_run_id, metrics=[Metric(k, float(v), now, 0) for k, v in summary.items()])
        self.client.set_terminated(self.parent_run_id, status=status)

    def answers_again(self, now: bool = False) -> bool:
        """Whether a server that stopped answering is back (asked at most every
        `PROBE_INTERVAL_S`, or `now`); a sqlite store is a file and always answers."""
        if self.mode != "worker":
            return True
        if not now and time.monotonic() - self._probed_at < PROBE_INTERVAL_S:
            return False
        self._probed_at = time.monotonic()
        return server_answers(self.uri)

    def deliver(self, result: RunResult, child_run_id: str | None, records_file: Path | None) -> list[str]:
        """Record a result the store holds, or keep it in the backlog while the server does not
        answer (each call would wait out MLflow's retries again). Returns warnings for the user."""
        if self.unreachable:
            self.backlog.append((result, child_run_id, records_file))
            return self._catch_up() if self.answers_again() else []
        try:
            self.record(result, child_run_id, records_file)
        except Exception as exc:  # noqa: BLE001 - logged from the backlog, or at the next start
            self.unreachable = True
            self.backlog.append((result, child_run_id, records_file))
            return [f"mlflow stopped answering at {result.spec.label} ({type(exc).__name__}); the store holds "
                    "every result, and MLflow gets them when it answers again (or at the next `run`)"]
        return []

    def flush(self) -> list[str]:
        """At the end of a command: log the backlog if the server answers now."""
        return self._catch_up() if self.unreachable and self.answers_again(now=True) else []

    def _catch_up(self) -> list[str]:
        logged = 0
        try:
            while self.backlog:
                self.record(*self.backlog[0])
                self.backlog.pop(0)
                logged += 1
        except Exception as exc:  # noqa: BLE001 - still down: try again later
            return [f"mlflow: catching up failed ({type(exc).__name__}); the next `run` does it"]
        self.unreachable = False
        return [f"mlflow answers again: logged the {logged} runs it missed"]

    def worker_context(self) -> WorkerTracking | None:
        if self.mode != "worker":
            return None
        return WorkerTracking(self.uri, self.experiment_id, self.parent_run_id)

    # --- child runs ----------------------------------------------------------------------------
    def child_runs(self) -> dict[str, list[tuple[str, str]]]:
        """run_key -> [(run_id, status)] of the study's child runs."""
        index: dict[str, list[tuple[str, str]]] = {}
        for run in search_all(self.client, self.experiment_id, "tags.role = 'run'"):
            index.setdefault(run.data.tags.get("run_key", ""), []).append((run.info.run_id, run.info.status))
        return index

    def record(self, result: RunResult, child_run_id: str | None, records_file: Path | None) -> str:
        """Log (driver mode) or close (worker mode) the child run of a result the store holds."""
        if child_run_id is None:
            child_run_id = log_child_run(
                self.client, self.experiment_id, self.parent_run_id, result, records_file
            )
        finish_child_run(self.client, child_run_id, result)
        return child_run_id

    def reconcile(self, store: "ResultStore", keys: Iterable[str], rerun: Iterable[str] = ()) -> tuple[int, int]:
        """Log every finished run of the store that MLflow lacks; mark orphans KILLED.

        Orphans are RUNNING children (an attempt the infrastructure lost) and the FINISHED
        children of the `rerun` keys (runs about to run again: their results were set aside or
        are overwritten), so that the attempt that completes a run is its one FINISHED child.
        Run only when no run of the study is in flight. Returns (logged, killed).
        """
        index = self.child_runs()
        logged = killed = 0
        rerun = set(rerun)
        finished = store.finished_keys() - rerun
        for key in keys:
            runs = index.get(key, [])
            for run_id, status in runs:
                if status == RUNNING or (status == FINISHED and key in rerun):
                    self.client.set_terminated(run_id, status=KILLED)
                    killed += 1
            if key in finished and not any(status == FINISHED for _, status in runs):
                self.record(store.read_result(key), None, store.records_path(key))
                logged += 1
        return logged, killed


def save_view(client: "MlflowClient", experiment_id: str, view: View) -> None:
    key, value = view.tag()
    client.set_experiment_tag(experiment_id, key, value)


# --- the report: the dashboard on the parent run, one aggregate run per cell -------------------------

AGGREGATE_ROLE = "aggregate"


class MlflowUnavailable(RuntimeError):
    """The study has no MLflow experiment or parent run to attach the report to."""


def log_report(uri: str, study_name: str, dashboard: Path, cells: Iterable["AggregateCell"]) -> dict[str, Any]:
    """Attach the dashboard folder to the parent run and (re)write one aggregate run per cell.

    Aggregate runs of an earlier report are deleted first, so re-running the report leaves one
    aggregate per cell, and saves one MLflow UI view per problem that overlays its algorithms.
    Returns the ids and the views' addresses for the caller to print.
    """
    from mlflow.entities import Metric, Param

    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        # Opening a missing sqlite store would create an empty one, for nothing.
        raise MlflowUnavailable(f"no MLflow database at {uri[len('sqlite:///'):]}")
    client = _client(uri)
    experiment = client.get_experiment_by_name(study_name)
    if experiment is None or experiment.lifecycle_stage != "active":
        raise MlflowUnavailable(f"no MLflow experiment named {study_name!r}: run the study with tracking first")
    experiment_id = experiment.experiment_id
    parent_id = find_parent_run(client, experiment_id)
    if parent_id is None:
        raise MlflowUnavailable(f"experiment {study_name!r} has no study parent run (tag role=study)")
    client.log_artifacts(parent_id, str(dashboard), artifact_path="dashboard")
    client.set_tag(parent_id, "dashboard", "dashboard/index.html")
    for old in search_all(client, experiment_id, f"tags.role = '{AGGREGATE_ROLE}'"):
        client.delete_run(old.info.run_id)
    now = int(time.time() * 1000)
    created: list[str] = []
    comparisons: dict[str, str] = {}
    for cell in cells:
        name = f"agg|{cell.problem}|{cell.algorithm}"
        n_finished = len(cell.finished_seeds)
        run = client.create_run(experiment_id, run_name=name, tags={
            "role": AGGREGATE_ROLE, "study": study_name, "problem": cell.problem, "algorithm": cell.algorithm,
            "fidelity": cell.fidelity, "study_parent_run_id": parent_id, "metric": cell.metric_description,
            "cell_status": "complete" if n_finished == cell.expected else ("no runs" if n_finished == 0 else "partial"),
            "mlflow.runName": name, "version": __version__,
        })
        run_id = run.info.run_id
        metrics = [Metric(key, value, now, step) for key, points in cell.curves.items() for step, value in points]
        metrics += [Metric(key, value, now, 0) for key, value in cell.summary.items()]
        seeds = ",".join(map(str, cell.finished_seeds))
        params = [Param("problem", cell.problem), Param("algorithm", cell.algorithm), Param("fidelity", cell.fidelity),
                  Param("seeds_finished", seeds[:6000] or "none"), Param("metric_column", cell.metric_column),
                  Param("include_initial", str(cell.include_initial))]
        client.log_batch(run_id, params=params)
        for chunk in _chunks(metrics, BATCH):
            client.log_batch(run_id, metrics=chunk)
        client.set_terminated(run_id, status=FINISHED if n_finished else FAILED)
        created.append(run_id)
        view = comparison_view(cell.fidelity, cell.problem)
        if view.name not in comparisons:
            save_view(client, experiment_id, view)
            comparisons[view.name] = view.address(ui_address(uri), experiment_id)
    return {"experiment_id": experiment_id, "parent_run_id": parent_id, "aggregate_run_ids": created,
            "runs_view": study_view(study_name).address(ui_address(uri), experiment_id),
            "comparison_views": comparisons}
