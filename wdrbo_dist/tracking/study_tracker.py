"""The driver's MLflow view of one study: experiment, parent run, child runs, kept in step with the store.

With sqlite or PostgreSQL only the driver logs (after the run's parquet is durable); with an `mlflow server`
each worker logs its own child run and the driver marks it FINISHED. On every start the driver
logs what the store holds and MLflow lacks. The comment above `StudyTracker` gives the modes,
the reconciliation, a silent server, and the runs' names, tags, params and metrics.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from wdrbo_dist import __version__
from wdrbo_dist.storage.atomic import write_json_atomic
from wdrbo_dist.tracking.views import study_view, ui_address
from wdrbo_dist.run.spec import RunResult
from wdrbo_dist.tracking import connection
from wdrbo_dist.tracking.child_runs import WorkerTracking, finish_child_run, log_child_run
from wdrbo_dist.tracking.batch_rows import ChildRunRows, StoreBatch, StoreRows, child_runs_by_key
from wdrbo_dist.tracking.connection import (
    FINISHED, KILLED, RUNNING, apply_client_settings, find_parent_run, mlflow_client, save_view, search_all,
    server_answers, tracking_mode,
)

if TYPE_CHECKING:
    from wdrbo_dist.storage.store import ResultStore
    from wdrbo_dist.study.spec import StudySpec

EXPERIMENT_KIND_TAG, EXPERIMENT_KIND = "mlflow.experimentKind", "custom_model_development"
# A database store gets finished runs in batches (`batch_rows`): this many, or every few seconds.
BATCH_RUNS, BATCH_SECONDS = 500, 5.0
LEDGER = "mlflow.json"  # in the output folder: the run keys MLflow holds a FINISHED child run of


# The store (parquet) is the canonical data; MLflow is a view of it that the driver keeps in
# step. Two modes, chosen from the URI:
#
# - `driver` (sqlite:///... or postgresql+psycopg://...): only the driver talks to the database
#   (sqlite does not like concurrent writers, cluster nodes cannot see the file, and workers
#   need no database password). It writes finished runs' child runs after their parquet is
#   durable, in batches (`batch_rows`: 500 runs or 5 s, and at the end of the command), without
#   the records artifact, from the rows each worker built (`StoreRows`, the hook); a failed run
#   the usual way. Several drivers may share one PostgreSQL database (one experiment each).
# - `worker` (http(s)://, a real `mlflow server`): each worker logs its own child run right after
#   `run_one` returns and leaves it RUNNING; the driver marks it FINISHED (or FAILED) once the
#   parquet is durable. A worker killed while logging leaves a RUNNING orphan that the driver
#   marks KILLED, so every run is FINISHED exactly once.
#
# On every start the driver reconciles: each finished run of the store without a FINISHED child
# run is logged from the store (a driver killed between store and tracker loses nothing). It
# reads the study's child runs for that only when it must: a command that ends with every task
# back and MLflow up to date leaves `LEDGER` in the output folder (the runs MLflow holds a
# FINISHED child run of), and the next start that finds it, for the same store, experiment and
# parent run, reads it instead and deletes it (a command cut short leaves none). With a server,
# reading 10^5 child runs back is minutes of paging; delete the file to make a start compare.
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
# total_inner_solve_s, total_inner_solves, total_inner_programs, total_inner_failures. Artifacts:
# records.parquet where a worker logs the run (an mlflow server), traceback.txt for a failed run. The experiment holds saved views of the MLflow UI
# (`mlflow_views`): the study's runs, and after `report` one comparison per problem.
class StudyTracker:
    """The driver's MLflow view of one study: experiment, parent run, child runs."""

    def __init__(self, uri: str, study_name: str, store: "ResultStore | None" = None) -> None:
        apply_client_settings()
        self.uri = uri
        # Set when the server stopped answering mid-study; the results it missed wait in
        # `backlog` (with the child run a worker opened, if any) until `answers_again`: their
        # keys only when the `store` holds them (memory stays bounded however long it is away),
        # read back from it then.
        self.unreachable = False
        self.store = store
        self.backlog: list[tuple[RunResult | str, str | ChildRunRows | None, Path | None]] = []
        self._probed_at = 0.0
        self.study_name = study_name
        self.mode = tracking_mode(uri)
        self.client = mlflow_client(uri)
        self.experiment_id = ""
        self.parent_run_id = ""
        self.batch: StoreBatch | None = None  # driver mode: finished runs waiting to be written
        self._written_at = time.monotonic()
        # The run keys MLflow holds a FINISHED child run of, as far as this driver knows (None:
        # not known; `reconcile` reads the child runs back).
        self.known: set[str] | None = None

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
        if self.mode == "driver":
            self.batch = StoreBatch(self.client, self.experiment_id, self.parent_run_id)

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
        elif self.uri.startswith("postgresql") and self.store is not None:
            # A shared database has no folder of its own: the study's artifacts (study.yaml, a
            # failed run's traceback, the report) go to its output folder, not the working one.
            location = (Path(self.store.root).resolve() / "mlruns").as_uri()
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
        `PROBE_INTERVAL_S`, or `now`); a sqlite store is a file and always answers, and a
        PostgreSQL server is tried as often as a server is probed (the catch-up is the probe)."""
        if self.uri.startswith("sqlite:///"):
            return True
        if not now and time.monotonic() - self._probed_at < connection.PROBE_INTERVAL_S:
            return False
        self._probed_at = time.monotonic()
        return self.mode != "worker" or server_answers(self.uri)

    def deliver(self, result: RunResult, child_run_id: str | ChildRunRows | None, records_file: Path | None) -> list[str]:
        """Record a result the store holds, or keep it in the backlog while the server does not
        answer (each call would wait out MLflow's retries again). Returns warnings for the user."""
        if self.unreachable:
            self._keep(result, child_run_id, records_file)
            return self._catch_up() if self.answers_again() else []
        try:
            self.record(result, child_run_id, records_file)
        except Exception as exc:  # noqa: BLE001 - logged from the backlog, or at the next start
            self.unreachable = True
            self._keep(result, child_run_id, records_file)
            return [f"mlflow stopped answering at {result.spec.label} ({type(exc).__name__}); the store holds "
                    "every result, and MLflow gets them when it answers again (or at the next `run`)"]
        return []

    def flush(self) -> list[str]:
        """At the end of a command: write the batch, log the backlog if the server answers now."""
        if self.batch is not None and not self.unreachable:
            runs = self.batch.pending.runs
            try:
                self._written(self.batch.write())
            except Exception as exc:  # noqa: BLE001 - the store has them; the next start logs them
                return [f"mlflow: writing {runs} runs failed ({type(exc).__name__}); the next `run` logs them"]
        return self._catch_up() if self.unreachable and self.answers_again(now=True) else []

    def _keep(self, result: RunResult, child_run_id: str | ChildRunRows | None, records_file: Path | None) -> None:
        """Into the backlog: the run's key where the store holds it (a worker's rows are built
        again from it), else the result itself."""
        if self.store is not None:
            self.backlog.append((result.spec.run_key, child_run_id if isinstance(child_run_id, str) else None,
                                 records_file))
        else:
            self.backlog.append((result, child_run_id, records_file))

    def _catch_up(self) -> list[str]:
        logged = 0
        try:
            while self.backlog:
                kept, child_run_id, records_file = self.backlog[0]
                result = self.store.read_result(kept) if isinstance(kept, str) and self.store else kept
                self.record(result, child_run_id, records_file)  # type: ignore[arg-type]
                self.backlog.pop(0)
                logged += 1
        except Exception as exc:  # noqa: BLE001 - still down: try again later
            return [f"mlflow: catching up failed ({type(exc).__name__}); the next `run` does it"]
        self.unreachable = False
        return [f"mlflow answers again: logged the {logged} runs it missed"]

    def worker_hook(self) -> WorkerTracking | StoreRows | None:
        """The hook the driver hands the backend, called on each result where the run ran: in
        worker mode it logs the child run and returns its id; in driver mode it builds a
        finished run's rows for the batch."""
        if self.batch is not None:
            return self.batch.rows_of
        if self.mode != "worker":
            return None
        return WorkerTracking(self.uri, self.experiment_id, self.parent_run_id)

    # --- child runs ----------------------------------------------------------------------------
    def child_runs(self) -> dict[str, list[tuple[str, str]]]:
        """run_key -> [(run_id, status)] of the study's child runs."""
        if self.batch is not None:
            return child_runs_by_key(self.client, self.experiment_id)
        index: dict[str, list[tuple[str, str]]] = {}
        for run in search_all(self.client, self.experiment_id, "tags.role = 'run'"):
            index.setdefault(run.data.tags.get("run_key", ""), []).append((run.info.run_id, run.info.status))
        return index

    def record(self, result: RunResult, child_run_id: str | ChildRunRows | None, records_file: Path | None) -> str:
        """Log (driver mode) or close (worker mode) the child run of a result the store holds.
        A finished run for a database store joins the batch (with the rows its worker built, if
        any; written every BATCH_RUNS runs or BATCH_SECONDS, and by `flush`); its child run id
        is then "" ."""
        if isinstance(child_run_id, ChildRunRows) or (child_run_id is None and self.batch is not None and result.ok):
            assert self.batch is not None
            self.batch.add(result, child_run_id if isinstance(child_run_id, ChildRunRows) else None)
            if self.batch.pending.runs >= BATCH_RUNS or time.monotonic() - self._written_at > BATCH_SECONDS:
                self._written(self.batch.write())
                self._written_at = time.monotonic()
            return ""
        if child_run_id is None:
            child_run_id = log_child_run(
                self.client, self.experiment_id, self.parent_run_id, result, records_file
            )
        finish_child_run(self.client, child_run_id, result)
        if result.ok:
            self._written([result.spec.run_key])
        return child_run_id

    def _written(self, run_keys: list[str]) -> None:
        if self.known is not None:
            self.known.update(run_keys)

    def reconcile(self, store: "ResultStore", keys: Iterable[str], rerun: Iterable[str] = (),
                  trusted: bool = False) -> tuple[int, int]:
        """Log every finished run of the store that MLflow lacks; mark orphans KILLED.

        Orphans are RUNNING children (an attempt the infrastructure lost) and the FINISHED
        children of the `rerun` keys (runs about to run again: their results were set aside or
        are overwritten), so that the attempt that completes a run is its one FINISHED child.
        `trusted`: no attempt can have been left RUNNING since `known` was read back or loaded
        (`load_ledger`), so when it holds every finished run and none of `rerun`, there is
        nothing to do and nothing is read back. Run only when no run of the study is in flight.
        Returns (logged, killed).
        """
        keys, rerun = list(keys), set(rerun)
        finished = store.finished_keys() - rerun
        if trusted and self.known is not None and finished & set(keys) <= self.known and not rerun & self.known:
            return 0, 0
        index = self.child_runs()
        logged = killed = 0
        known = set()
        for key in keys:
            runs = index.get(key, [])
            for run_id, status in runs:
                if status == RUNNING or (status == FINISHED and key in rerun):
                    self.client.set_terminated(run_id, status=KILLED)
                    killed += 1
            if key in finished and not any(status == FINISHED for _, status in runs):
                self.record(store.read_result(key), None, store.records_path(key))
                logged += 1
            if key in finished:
                known.add(key)
        if self.batch is not None:
            self.batch.write()
        self.known = known
        return logged, killed

    # --- the ledger: what MLflow holds, kept beside the store between commands ----------------
    def _ledger_identity(self) -> dict[str, str]:
        return {"tracking_uri": self.uri, "experiment_id": self.experiment_id, "parent_run_id": self.parent_run_id}

    def load_ledger(self, folder: Path) -> None:
        """Take `known` from the ledger the last command left in `folder`, if it is this
        study's (same store, experiment and parent run), and delete it: until this command
        ends cleanly, no ledger vouches for MLflow."""
        path = Path(folder) / LEDGER
        try:
            data = json.loads(path.read_text())
            path.unlink()
        except (OSError, ValueError):
            return
        if isinstance(data, dict) and all(data.get(k) == v for k, v in self._ledger_identity().items()):
            keys = data.get("run_keys")
            if isinstance(keys, list) and all(isinstance(k, str) for k in keys):
                self.known = set(keys)

    def save_ledger(self, folder: Path) -> None:
        """Leave the ledger for the next command (call only when no attempt of this command
        can be RUNNING in MLflow and every finished run was logged: `known` is then whole)."""
        if self.known is not None:
            write_json_atomic({**self._ledger_identity(), "version": __version__, "run_keys": sorted(self.known)},
                              Path(folder) / LEDGER)

