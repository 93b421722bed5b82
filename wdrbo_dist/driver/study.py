"""The study driver: validate -> lock -> set damaged aside -> plan -> map -> store -> track -> summary.

Only the driver decides what is finished: a result is finished once the store has made its
parquet durable, and only then does the tracker mark its MLflow run FINISHED. A driver that
dies leaves every finished run on disk; the same command then runs only what is missing. The
comment above `run_study` gives the lock, damaged files, lost runs and a silent tracking server.
The command line brings what a person sees: the progress bar, console text and Ctrl-C handling.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace

from wdrbo_dist.errors import one_line
from wdrbo_dist.execution.backends import map_tasks
from wdrbo_dist.execution.task import ClusterGone, Outcome, Task
from wdrbo_dist.storage.lock import driver_lock
from wdrbo_dist.storage.output_folder import (
    OutputWriteError, check_folder, check_same_study, keep_elsewhere, other_versions_line, reason,
    write_study_file, writing,
)
from wdrbo_dist.driver.plan import make_tasks, plan_study
from wdrbo_dist.driver.report import Console, Echo, Guard, NoGuard, StudyReport, Watcher, silent
from wdrbo_dist.run.spec import RunResult, RunSpec
from wdrbo_dist.run.loop import run_one
from wdrbo_dist.storage.run_files import encoded_run
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.storage.writer import NotAttempted, Saved, StoreWriter
from wdrbo_dist.study.spec import StudySpec
from wdrbo_dist.tracking.connection import TrackingError, check_tracking_uri
from wdrbo_dist.tracking.study_tracker import StudyTracker


# The run function the backends map: the run's own errors become a FAILED result, never an
# exception, so that a deterministic error is recorded once and not retried.
run_captured = functools.partial(run_one, progress=False, capture_errors=True)
# The store compacts when this many finished runs are in their own files (the unit of
# durability until then), so a big study's report reads one dataset; a small study stays loose.
COMPACT_EVERY = 1000


# One driver per output folder: a second one (another terminal, a resubmitted job) stops with
# `FolderInUse` before it touches anything, since it would run the first one's runs again and
# mark its MLflow runs KILLED. A run whose files do not read back whole is named on `echo`,
# moved to `<output_dir>/damaged/<time>/` and run again (see the store's docstring).
#
# Only an error of the run itself is FAILED. A run the infrastructure lost (the backend gave up
# after its resubmissions) and the runs of a cluster that is gone stay not done: the command
# ends with `ExitCode.UNAVAILABLE` and the same command finishes them. A tracking server that stops
# answering is left alone for the rest of the command; the next start logs what it missed.
def run_study(
    study: StudySpec,
    backend: str | None = None,
    workers: int | None = None,
    address: str | None = None,
    force: bool = False,
    rerun_failed: bool = False,
    progress: Callable[[Sequence[Task]], Watcher] | None = None,
    echo: Echo = silent,
    ctrl_c: Guard | None = None,
    run: Callable[[RunSpec], RunResult] = run_captured,
) -> StudyReport:
    """Run what is missing of `study`; see the module docstring for the guarantees.

    `progress` makes the watcher of the tasks about to run, `echo` takes the driver's lines
    and `ctrl_c` guards the loop: the command line's, none by default. `run` is what each
    task runs (a stand-in measures the runner alone: benchmarks/runner/scaling.py).
    Raises, before any work: `FolderUnusable` for an output folder that cannot be written,
    `OtherStudy` for one that holds another study, `FolderInUse` while another driver holds it,
    `TrackingError` or `ClusterUnreachable` for a store or an address that does not answer
    (`ResourcesUnfit`, one of those, for a run no node of the Ray can place).
    `OutputWriteError` when the folder cannot be written at start (a full disk); later, the
    report's `write_error` says so.
    """
    check_folder(study.output_dir)
    check_same_study(study)
    if study.tracking_enabled:
        check_tracking_uri(study.tracking_uri)  # before any run: fail fast
    if (backend or study.backend) == "ray":
        from wdrbo_dist.execution.ray_backend import check_address, check_resources

        check_address(address)
        one_each = list({spec.algorithm_label: spec for spec in study.runs}.values())  # what each run asks
        check_resources(make_tasks(study, one_each), workers or study.workers, address)
    how = Execution(backend or study.backend, workers or study.workers, address, force, rerun_failed)
    with driver_lock(study.output_dir) as lock:
        if lock is None:
            echo(f"warning: {study.output_dir} cannot be locked (no file locks here): "
                 "nothing stops a second driver on it")
        return StudyRun(study, how, Console(progress, echo, ctrl_c or NoGuard()), run).execute()


@dataclass(frozen=True)
class Execution:
    """How this command runs the study (what it runs is the `StudySpec`)."""

    backend: str
    workers: int
    address: str | None = None
    force: bool = False  # run finished runs again
    rerun_failed: bool = False


class StudyRun:
    """One command's work on a locked output folder, as a short sequence of steps (`execute`)."""

    def __init__(self, study: StudySpec, how: Execution, console: Console,
                 run: Callable[[RunSpec], RunResult]) -> None:
        self.study, self.how, self.console, self.run = study, how, console, run
        self.store = ResultStore(study.output_dir)
        self.tracker: StudyTracker | None = None
        self.report: StudyReport

    def execute(self) -> StudyReport:
        started = time.monotonic()
        self.plan()
        self.start_tracking()
        self.map_and_store()
        self.compact_at_end()
        self.report.wall_time_s = time.monotonic() - started
        self.end_tracking()
        return self.report

    def plan(self) -> None:
        """Set damaged files aside, work out what is missing, write study.json, name other versions."""
        study, store = self.study, self.store
        with writing("the damaged runs' files", store.root):
            store.remove_temporaries()  # what a crash left mid-write
            _set_aside_damaged(study, store, self.console.echo)
        plan = plan_study(study, store, force=self.how.force, rerun_failed=self.how.rerun_failed)
        self.report = StudyReport(study=study, plan=plan)
        with writing("study.json", store.root):
            write_study_file(study)
        line = other_versions_line(store)
        if line:
            self.console.echo(line)

    def start_tracking(self) -> None:
        """Open the study's MLflow experiment and bring it in step with the store (no run started yet)."""
        study, plan = self.study, self.report.plan
        if not study.tracking_enabled:
            return
        try:
            tracker = StudyTracker(study.tracking_uri, study.name, store=self.store)
            tracker.start(study, study.config_text(), {"backend": self.how.backend, "workers": self.how.workers})
            self.report.runs_address = tracker.runs_address()
            tracker.load_ledger(self.store.root)
            # A run about to run again (set aside as damaged, or --force) keeps no FINISHED child.
            logged, killed = tracker.reconcile(self.store, [r.run_key for r in plan.runs],
                                               rerun=[r.run_key for r in plan.todo], trusted=True)
        except Exception as exc:  # noqa: BLE001 - no run has started: one line, nothing to lose
            raise TrackingError(f"tracking_uri {study.tracking_uri}: MLflow failed while starting study "
                                f"{study.name!r} ({one_line(exc, named=True)}); fix the store or use "
                                "tracking_uri: none; no run started") from None
        self.tracker = tracker
        if logged or killed:
            self.console.echo(f"mlflow: logged {logged} finished runs from the store, "
                              f"marked {killed} orphan or superseded runs KILLED")

    def map_and_store(self) -> None:
        """Map the missing runs over the backend; store each result (durable), then track it."""
        study, how, report, store, tracker = self.study, self.how, self.report, self.store, self.tracker
        ctrl_c, plan = self.console.ctrl_c, report.plan
        tasks = make_tasks(study, plan.todo)
        self.console.echo(
            f"study {study.name}: {len(plan.runs)} runs, {len(plan.finished)} already finished, "
            f"{len(plan.failed)} failed before, {len(tasks)} to run on {how.backend}"
            + (f" with {how.workers} workers" if how.backend != "serial" else " in this process")
        )
        bar = self.console.progress(tasks) if self.console.progress else None
        hook = tracker.worker_hook() if tracker is not None else None
        mapped = functools.partial(encoded_run, self.run)  # the records leave the worker as the store's bytes
        outcomes: Iterator[Outcome] = (map_tasks(tasks, how.backend, how.workers, how.address, run=mapped,
                                                 hook=hook) if tasks else iter(()))
        writer: StoreWriter[Outcome] = StoreWriter(store)  # saves while the loop receives the next
        due = 0  # finished runs handed to the writer since the last compaction
        try:
            with ctrl_c.taken():
                try:
                    for outcome in outcomes:
                        with ctrl_c.deferred():
                            report.retried = report.retried or outcome.attempts > 1
                            if outcome.lost:
                                report.lost.append(outcome)
                            else:
                                writer.submit(outcome, outcome.result)
                                due += outcome.result.ok
                            _track_saved(writer.saved(), store, tracker, report)
                            if due >= COMPACT_EVERY:
                                _track_saved(writer.drain(), store, tracker, report)
                                with writing("the compacted runs", store.root):
                                    store.compact()
                                due = 0
                            if bar is not None:
                                bar.update(outcome)
                finally:
                    close = getattr(outcomes, "close", None)
                    if close is not None:
                        close()  # cancels what is still running
                    if bar is not None:
                        bar.close()
                    with ctrl_c.deferred():  # every result received is stored (or kept elsewhere), then tracked
                        try:
                            _track_saved(writer.close(), store, None if ctrl_c.cut_short else tracker, report)
                        except OutputWriteError as exc:
                            report.write_error = str(exc)
        except KeyboardInterrupt:
            report.interrupted = True
        except ClusterGone as exc:
            report.cluster_gone = str(exc)
        except OutputWriteError as exc:
            report.write_error = str(exc)
        finally:
            writer.close()  # the saves a second Ctrl-C stopped waiting for: done before the folder is compacted

    def compact_at_end(self) -> None:
        """Compact what is loose (a crashed driver's too) and delete the compacted runs' own files."""
        store = self.store
        try:
            if len(store.loose_keys()) >= COMPACT_EVERY or store.leftovers():  # a crashed driver's too
                store.compact()
        except OSError as exc:  # the loose files stay the finished runs' record
            self.report.store_warning = (f"the finished runs stay in their own files, not compacted: cannot write "
                                         f"{store.root} ({reason(exc)}); nothing is lost, the next `run` compacts them")
        store.empty_discarded()  # the compacted runs' own files, moved aside while the study ran

    def end_tracking(self) -> None:
        """Bring MLflow in step with the store and end the parent run; keep the ledger after a clean command."""
        report, tracker, store, plan = self.report, self.tracker, self.store, self.report.plan
        if tracker is not None and self.console.ctrl_c.cut_short:
            # It may have stopped an MLflow call midway, and a sqlite store's write lock with it.
            report.tracking_warnings.append("mlflow: a second Ctrl-C stopped the driver while it stored or logged a "
                                            "result; the next `run` logs what MLflow missed")
            return
        if tracker is None:
            return
        report.tracking_warnings += tracker.flush()
        if tracker.unreachable:
            return
        # Every task back at its first attempt, MLflow took every result: none RUNNING there.
        clean = not (report.interrupted or report.cluster_gone or report.write_error or report.lost
                     or report.retried or report.tracking_warnings)
        try:
            tracker.reconcile(store, [r.run_key for r in plan.runs], trusted=clean)
            status = "KILLED" if report.interrupted or report.cluster_gone or report.write_error else (
                "FAILED" if report.exit_code else "FINISHED")
            tracker.end(status, {
                "runs_finished_total": float(len(store.finished_keys() & {r.run_key for r in plan.runs})),
                "runs_failed_now": float(len(report.failed)),
                "runs_lost_now": float(len(report.lost)),
                "study_wall_time_s": report.wall_time_s,
            })
            if clean:
                tracker.save_ledger(store.root)
        except Exception as exc:  # noqa: BLE001 - the store holds everything; next run catches up
            report.tracking_warnings.append(f"mlflow: {one_line(exc, named=True)}")


def _set_aside_damaged(study: StudySpec, store: ResultStore, echo: Echo) -> int:
    """Move the study's damaged files aside, one line each on `echo`; returns how many runs.

    Only this study's runs: other files in the folder (another version's keys) are not ours.
    """
    damages = store.damaged(r.run_key for r in study.runs)
    folder = store.set_aside(damages)
    labels = {r.run_key: r.label for r in study.runs}
    for damage in damages:
        echo(f"{damage.line(store.root, labels.get(damage.run_key, ''))}; moved to {folder}, it runs again")
    return len(damages)


def _settle(outcome: Outcome, store: ResultStore, tracker: StudyTracker | None, report: StudyReport) -> None:
    """The loop's steps for one outcome, in this thread: store (durable), then track.

    A lost outcome is not stored: its result is a placeholder, and the run is still to do.
    """
    if outcome.lost:
        report.lost.append(outcome)
        return
    try:
        store.save(outcome.result)
        error = None
    except OSError as exc:
        error = exc
    _track_saved([Saved(outcome, outcome.result, error)], store, tracker, report)


def _track_saved(saves: Sequence[Saved[Outcome]], store: ResultStore, tracker: StudyTracker | None,
                 report: StudyReport) -> None:
    """Count and track each save, in order; a tracker failure never loses a result. A save the
    disk refused keeps its finished run elsewhere and raises `OutputWriteError` (the ones after
    it were not attempted: they run again)."""
    for save in saves:
        result = save.result
        if isinstance(save.error, NotAttempted):
            continue
        if isinstance(save.error, OSError):  # a full disk: keep the finished run elsewhere, stop the study
            if _keep_unsaved(result, store, report):
                report.finished.append(result)
            raise OutputWriteError(f"cannot write {store.root} ({reason(save.error)})") from None
        if save.error is not None:
            raise save.error
        # The report keeps what a summary needs, not the records (the store has them): a 10^5-run
        # study's driver would otherwise hold every run's records until it ends.
        (report.finished if result.ok else report.failed).append(replace(result, records=None, records_parquet=None))
        if tracker is None:
            continue
        if save.item.hook_error and not tracker.unreachable:
            report.tracking_warnings.append(f"{result.spec.label}: worker could not log to mlflow; the driver did")
        records_file = store.records_path(result.spec.run_key) if result.ok else None
        report.tracking_warnings += tracker.deliver(result, save.item.hook_value, records_file)


def _keep_unsaved(result: RunResult, store: ResultStore, report: StudyReport) -> bool:
    """Write a finished result the store could not take into a folder elsewhere, named in
    `report`; whether it was kept."""
    label = f"{result.spec.label} [{result.spec.run_key}]"
    if not result.ok:
        report.kept_elsewhere = f"{label} failed and was not stored; it runs again"
        return False
    folder, why = keep_elsewhere(report.study.name, lambda root: ResultStore(root).save(result))
    report.kept_elsewhere = (f"finished run {label} is kept in {folder}: move {folder / 'runs'}/* into "
                             f"{store.runs_dir}/" if folder is not None else
                             f"finished run {label} could not be kept anywhere ({why}); it runs again")
    return folder is not None
