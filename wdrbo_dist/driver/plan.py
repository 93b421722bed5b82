"""A study's plan and standing: which runs to start now, in which order, and what the store
holds of each cell. Pure reads of the store; the driver (`study`) and `status` use them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from wdrbo_dist.execution.task import Task
from wdrbo_dist.storage.output_folder import check_same_study, other_versions_line
from wdrbo_dist.run.spec import RunSpec, resolved_options
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.study.spec import StudySpec


def relative_cost(spec: RunSpec) -> float:
    """Expected run time relative to ERBO, from the algorithm registry (1 if unknown)."""
    try:
        from wdrbo_dist.acquisition.registry import ALGORITHMS

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
    notes: list[str] = field(default_factory=list)  # another study's folder, another version's runs

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
    damaged = [damage.line(store.root, labels.get(damage.run_key, "")) for damage in store.damaged(labels)]
    try:
        check_same_study(study)
        notes = []
    except ValueError as exc:
        notes = [f"note: {exc}"]
    notes.append(other_versions_line(store))
    return StudyStatus({key: (d, f, m) for key, (d, f, m) in cells.items()}, damaged, notes)


def make_tasks(study: StudySpec, specs: Sequence[RunSpec]) -> list[Task]:
    """Tasks in start order: the longest expected first (ties keep the study's order)."""
    tasks = []
    for spec in specs:
        resources = study.resources(spec.algorithm_label)
        tasks.append(Task(
            spec=spec, threads=resources.threads, num_cpus=resources.num_cpus, num_gpus=resources.num_gpus,
            expected_cost=expected_cost(spec), timeout_s=study.run_timeout_s,
        ))
    return sorted(tasks, key=lambda t: -t.expected_cost)
