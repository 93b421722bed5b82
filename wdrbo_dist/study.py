"""The study driver: validate -> lock -> set damaged aside -> plan -> map -> store -> track -> summary.

Only the driver decides what is finished: a result is finished once the store has made its
parquet durable, and only then does the tracker mark its MLflow run FINISHED. A driver that
dies leaves every finished run on disk; the same command then runs only what is missing. The
comment above `run_study` gives the lock, damaged files, lost runs and a silent tracking server.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from wdrbo_dist.backends import map_tasks
from wdrbo_dist.backends.task import ClusterGone, Outcome, Task
from wdrbo_dist.config import StudySpec
from wdrbo_dist.mlflow_views import ui_lines
from wdrbo_dist.run import RunResult, RunSpec, resolved_options
from wdrbo_dist.store import ResultStore, driver_lock, write_json_atomic
from wdrbo_dist.tracking import StudyTracker, check_tracking_uri

Echo = Callable[[str], None]
# Runs lost to the infrastructure or a cluster that is gone: nothing wrong with the study, run the
# same command again when the cluster is back (sysexits.h's EX_UNAVAILABLE).
EXIT_UNAVAILABLE = 69


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def relative_cost(spec: RunSpec) -> float:
    """Expected run time relative to ERBO, from the algorithm registry (1 if unknown)."""
    try:
        from wdrbo_dist.algorithms import ALGORITHMS

        return float(ALGORITHMS[spec.algorithm].cost_estimate(resolved_options(spec)))
    except Exception:  # noqa: BLE001 - a guess is fine for scheduling
        return 1.0


def expected_cost(spec: RunSpec) -> float:
    """A relative estimate of a run's time: BO steps times the algorithm's relative cost."""
    return relative_cost(spec) * max(1, spec.evaluations - spec.init_size)


@dataclass
class Plan:
    """Which runs of a study to start now, and which are already settled."""

    runs: list[RunSpec]
    todo: list[RunSpec]
    finished: list[RunSpec]  # skipped: already finished
    failed: list[RunSpec]  # skipped: failed before (re-run with --rerun-failed)


def plan_study(study: StudySpec, store: ResultStore, force: bool = False, rerun_failed: bool = False) -> Plan:
    runs = study.runs
    finished_keys = store.finished_keys()
    failed_keys = store.failed_keys()
    finished = [] if force else [r for r in runs if r.run_key in finished_keys]
    failed = [] if force or rerun_failed else [r for r in runs if r.run_key in failed_keys]
    settled = {r.run_key for r in finished + failed}
    todo = [r for r in runs if r.run_key not in settled]
    return Plan(runs=runs, todo=todo, finished=finished, failed=failed)


@dataclass
class StudyStatus:
    """Per (problem, algorithm): (done, failed, missing) over the seeds; damaged runs (counted
    missing, one line each) as the store names them."""

    cells: dict[tuple[str, str], tuple[int, int, int]]
    damaged: list[str]

    @property
    def totals(self) -> tuple[int, int, int]:
        return tuple(sum(cell[i] for cell in self.cells.values()) for i in range(3))  # type: ignore[return-value]


def study_status(study: StudySpec) -> StudyStatus:
    """What the store holds of `study`, without changing anything."""
    store = ResultStore(study.output_dir)
    finished, failed = store.finished_keys(), store.failed_keys()
    cells: dict[tuple[str, str], list[int]] = {}
    for spec in study.runs:
        cell = cells.setdefault((spec.problem, spec.algorithm_label), [0, 0, 0])
        cell[0 if spec.run_key in finished else 1 if spec.run_key in failed else 2] += 1
    labels = {spec.run_key: spec.label for spec in study.runs}
    damaged = [damage.line(store.root, labels[damage.run_key]) for damage in store.damaged(labels)]
    return StudyStatus({key: (d, f, m) for key, (d, f, m) in cells.items()}, damaged)


def make_tasks(study: StudySpec, specs: Sequence[RunSpec], tracker: StudyTracker | None) -> list[Task]:
    """Tasks in start order: the longest expected first (ties keep the study's order)."""
    context = tracker.worker_context() if tracker else None
    tasks = []
    for spec in specs:
        resources = study.resources(spec.algorithm_label)
        tasks.append(Task(
            spec=spec, threads=resources.threads, num_cpus=resources.num_cpus, num_gpus=resources.num_gpus,
            expected_cost=expected_cost(spec), tracking=context,
        ))
    return sorted(tasks, key=lambda t: -t.expected_cost)


class Progress:
    """done / failed / remaining and an ETA weighted by expected cost (longest runs go first,
    so a count-based rate would be pessimistic early on)."""

    def __init__(self, tasks: Sequence[Task], enabled: bool, echo: Echo) -> None:
        self.total = len(tasks)
        self.total_cost = sum(t.expected_cost for t in tasks) or 1.0
        self.done = self.failed = self.lost = 0
        self.cost_done = 0.0
        self.start = time.monotonic()
        self.echo = echo
        self.bar = None
        if enabled and self.total and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=round(self.total_cost, 3), unit="", bar_format=(
                "{l_bar}{bar}| [{elapsed}<{remaining}{postfix}]"), desc="study", leave=True)
            self._postfix()
        self.lines = enabled and self.bar is None

    def _postfix(self) -> None:
        if self.bar is not None:
            lost = f" lost {self.lost}" if self.lost else ""
            self.bar.set_postfix_str(f"done {self.done} failed {self.failed}{lost} remaining {self.remaining}")

    @property
    def remaining(self) -> int:
        return self.total - self.done - self.failed - self.lost

    def eta_s(self) -> float:
        elapsed = time.monotonic() - self.start
        if self.cost_done <= 0:
            return float("nan")
        return elapsed * (self.total_cost - self.cost_done) / self.cost_done

    def update(self, outcome: Outcome) -> None:
        if outcome.lost:
            self.lost += 1
        elif outcome.result.ok:
            self.done += 1
        else:
            self.failed += 1
        self.cost_done += outcome.task.expected_cost
        if self.bar is not None:
            self.bar.update(outcome.task.expected_cost)
            self._postfix()
        elif self.lines:
            eta = self.eta_s()
            eta_text = "?" if eta != eta else f"{eta:.0f} s"
            status = "lost" if outcome.lost else outcome.result.status.lower()
            self.echo(
                f"[{self.total - self.remaining}/{self.total}] {status} "
                f"{outcome.task.spec.label} in {outcome.result.wall_time_s:.1f} s "
                f"(done {self.done}, failed {self.failed}, remaining {self.remaining}, ETA {eta_text})"
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@dataclass
class StudyReport:
    """What a `run` did, for the end-of-study summary and the exit code."""

    study: StudySpec
    plan: Plan
    finished: list[RunResult] = field(default_factory=list)
    failed: list[RunResult] = field(default_factory=list)
    lost: list[Outcome] = field(default_factory=list)  # given up by the backend, not done
    cluster_gone: str | None = None  # why the backend stopped, when the cluster is gone
    interrupted: bool = False
    wall_time_s: float = 0.0
    tracking_warnings: list[str] = field(default_factory=list)
    runs_address: str = ""  # the study's runs in the MLflow UI, when tracked

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        if self.cluster_gone or self.lost:
            return EXIT_UNAVAILABLE
        return 1 if self.failed or self.plan.failed else 0

    @property
    def not_done(self) -> int:
        """Runs of this command's plan that neither finished nor failed."""
        return len(self.plan.todo) - len(self.finished) - len(self.failed)

    def lines(self) -> list[str]:
        p = self.plan
        out = [
            f"study {self.study.name}: {len(p.runs)} runs; this command: {len(self.finished)} finished, "
            f"{len(self.failed)} failed, {f'{len(self.lost)} lost, ' if self.lost else ''}"
            f"{len(p.finished)} skipped (already finished), "
            f"{len(p.failed)} skipped (failed before) in {self.wall_time_s:.1f} s",
        ]
        if self.cluster_gone:
            out.append(f"cluster gone: {self.cluster_gone}; {self.not_done} runs not done, every finished run "
                       f"is in the store; run the same command again when the cluster is back (exit {EXIT_UNAVAILABLE})")
        elif self.interrupted:
            out.append(f"interrupted: {self.not_done} runs not done; run the same command again to finish them")
        for outcome in self.lost:
            out.append(f"LOST {outcome.task.spec.label} [{outcome.task.spec.run_key}] after {outcome.attempts} "
                       f"attempts: {outcome.lost[:200]} (not FAILED: the same command runs it again)")
        for result in self.failed:
            last = (result.error or "").strip().splitlines()[-1:] or ["(no traceback)"]
            out.append(f"FAILED {result.spec.label} [{result.spec.run_key}]: {last[0][:200]}")
        for spec in p.failed:
            out.append(f"FAILED before {spec.label} [{spec.run_key}] (re-run with --rerun-failed)")
        if self.failed or p.failed:
            out.append(f"tracebacks: {self.study.output_dir / 'failed'}/<run_key>.json")
        out.extend(f"warning: {w}" for w in self.tracking_warnings[:5])
        if self.runs_address:
            out += ui_lines({"": self.runs_address}, self.study.tracking_uri)
        return out


# One driver per output folder: a second one (another terminal, a resubmitted job) stops with
# `FolderInUse` before it touches anything, since it would run the first one's runs again and
# mark its MLflow runs KILLED. A run whose files do not read back whole is named on `echo`,
# moved to `<output_dir>/damaged/<time>/` and run again (see the store's docstring).
#
# Only an error of the run itself is FAILED. A run the infrastructure lost (the backend gave up
# after its resubmissions) and the runs of a cluster that is gone stay not done: the command
# ends with `EXIT_UNAVAILABLE` and the same command finishes them. A tracking server that stops
# answering is left alone for the rest of the command; the next start logs what it missed.
def run_study(
    study: StudySpec,
    backend: str | None = None,
    workers: int | None = None,
    address: str | None = None,
    force: bool = False,
    rerun_failed: bool = False,
    progress: bool = True,
    echo: Echo = _stderr,
) -> StudyReport:
    """Run what is missing of `study`; see the module docstring for the guarantees.

    Raises `FolderInUse` (before any work) while another driver holds the output folder,
    `TrackingError` or `ClusterUnreachable` (before any work) for a store or an address that
    does not answer.
    """
    if study.tracking_enabled:
        check_tracking_uri(study.tracking_uri)  # before any run: fail fast
    if (backend or study.backend) == "ray":
        from wdrbo_dist.backends.ray_backend import check_address

        check_address(address)
    with driver_lock(study.output_dir) as lock:
        if lock is None:
            echo(f"warning: {study.output_dir} cannot be locked (no file locks here): "
                 "nothing stops a second driver on it")
        return _run_locked(study, backend or study.backend, workers or study.workers, address,
                           force, rerun_failed, progress, echo)


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


def _run_locked(
    study: StudySpec, backend: str, workers: int, address: str | None, force: bool, rerun_failed: bool,
    progress: bool, echo: Echo,
) -> StudyReport:
    started = time.monotonic()
    store = ResultStore(study.output_dir)
    _set_aside_damaged(study, store, echo)
    tracker = StudyTracker(study.tracking_uri, study.name) if study.tracking_enabled else None
    plan = plan_study(study, store, force=force, rerun_failed=rerun_failed)
    report = StudyReport(study=study, plan=plan)
    _write_study_file(study)
    if tracker is not None:
        tracker.start(study, _config_text(study), {"backend": backend, "workers": workers})
        report.runs_address = tracker.runs_address()
        # A run about to run again (set aside as damaged, or --force) keeps no FINISHED child.
        logged, killed = tracker.reconcile(store, [r.run_key for r in plan.runs], rerun=[r.run_key for r in plan.todo])
        if logged or killed:
            echo(f"mlflow: logged {logged} finished runs from the store, marked {killed} orphan or superseded runs KILLED")

    tasks = make_tasks(study, plan.todo, tracker)
    echo(
        f"study {study.name}: {len(plan.runs)} runs, {len(plan.finished)} already finished, "
        f"{len(plan.failed)} failed before, {len(tasks)} to run on {backend} with {workers} workers"
    )
    bar = Progress(tasks, progress, echo)
    outcomes = map_tasks(tasks, backend, workers, address) if tasks else iter(())
    ctrl_c = CtrlC()
    try:
        with ctrl_c.taken():
            for outcome in outcomes:
                with ctrl_c.deferred():
                    _settle(outcome, store, tracker, report)
                    bar.update(outcome)
    except KeyboardInterrupt:
        report.interrupted = True
    except ClusterGone as exc:
        report.cluster_gone = str(exc)
    finally:
        close = getattr(outcomes, "close", None)
        if close is not None:
            close()  # cancels what is still running
        bar.close()
    report.wall_time_s = time.monotonic() - started
    if tracker is not None and ctrl_c.cut_short:
        # It may have stopped an MLflow call midway, and a sqlite store's write lock with it.
        report.tracking_warnings.append("mlflow: a second Ctrl-C stopped the driver while it stored or logged a "
                                        "result; the next `run` logs what MLflow missed")
        tracker = None
    if tracker is not None:
        report.tracking_warnings += tracker.flush()
    if tracker is not None and not tracker.unreachable:
        try:
            tracker.reconcile(store, [r.run_key for r in plan.runs])
            status = "KILLED" if report.interrupted or report.cluster_gone else (
                "FAILED" if report.exit_code else "FINISHED")
            tracker.end(status, {
                "runs_finished_total": float(len(store.finished_keys() & {r.run_key for r in plan.runs})),
                "runs_failed_now": float(len(report.failed)),
                "runs_lost_now": float(len(report.lost)),
                "study_wall_time_s": report.wall_time_s,
            })
        except Exception as exc:  # noqa: BLE001 - the store holds everything; next run catches up
            report.tracking_warnings.append(f"mlflow: {type(exc).__name__}: {exc}")
    return report


class CtrlC:
    """Ctrl-C during the study loop, noted as well as raised, and held back while an outcome settles.

    Python raises the KeyboardInterrupt in whatever the main thread runs at that moment. Raised in
    the middle of an MLflow call it can leave the sqlite store's write lock held (the next call
    waits on it; seen here), and raised in a finaliser (a `__del__`, a weakref callback) it is
    printed and dropped, and the study ran on to exit 0 (CI, once). So while an outcome is stored
    and tracked the signal is only noted, and raised when that is done; while the driver waits on
    the backend it is raised at once, and one that a finaliser dropped is raised after the next
    outcome settles. A second Ctrl-C is raised at once (a server that stopped answering can hold
    a call for MLflow's retries), and the command then leaves MLflow to the next `run`. A driver
    that ignores SIGINT (started in the background) keeps ignoring it.
    """

    def __init__(self) -> None:
        self.requested = False
        self.cut_short = False  # a second Ctrl-C stopped an outcome's storing or logging
        self._deferring = False

    def _handler(self, signum: int, frame: object) -> None:
        again, self.requested = self.requested, True
        if self._deferring and not again:
            return
        self.cut_short = self._deferring  # a second Ctrl-C stops a slow MLflow call too
        raise KeyboardInterrupt

    @contextmanager
    def taken(self) -> Iterator[None]:
        """Within the block, SIGINT goes to this object (if Python's default handler has it)."""
        ours = (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
        if ours:
            signal.signal(signal.SIGINT, self._handler)
        try:
            yield
            if self.requested:  # noted, then dropped by a finaliser after the last outcome
                raise KeyboardInterrupt
        finally:
            if ours:
                signal.signal(signal.SIGINT, signal.default_int_handler)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Within the block a Ctrl-C is only noted; it is raised when the block is done."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self.requested:
            raise KeyboardInterrupt


def _settle(outcome: Outcome, store: ResultStore, tracker: StudyTracker | None, report: StudyReport) -> None:
    """Store first (durable), then tell the tracker; a tracker failure never loses a result.

    A lost outcome is not stored: its result is a placeholder, and the run is still to do.
    """
    if outcome.lost:
        report.lost.append(outcome)
        return
    result = outcome.result
    store.save(result)
    (report.finished if result.ok else report.failed).append(result)
    if tracker is None:
        return
    if outcome.tracking_error and not tracker.unreachable:
        report.tracking_warnings.append(f"{result.spec.label}: worker could not log to mlflow; the driver did")
    records_file = store.records_path(result.spec.run_key) if result.ok else None
    report.tracking_warnings += tracker.deliver(result, outcome.child_run_id, records_file)


def _config_text(study: StudySpec) -> str:
    import yaml

    if study.source is not None and study.source.is_file():
        return study.source.read_text()
    return yaml.safe_dump(study.raw, sort_keys=False)


def _write_study_file(study: StudySpec) -> None:
    """The study's config beside its runs, so the output folder explains itself."""
    write_json_atomic(
        {"name": study.name, "config": study.raw, "source": str(study.source or ""),
         "run_keys": [r.run_key for r in study.runs]},
        study.output_dir / "study.json",
    )
