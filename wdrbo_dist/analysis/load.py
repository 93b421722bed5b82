"""Store -> tidy frames: one row per expected run (with its status) and one row per step.

The study config says which runs should exist; the parquet store says which did. Every
expected run gets a row with status `finished`, `failed` or `missing` (an unreadable record
file counts as failed, with the reason), so that no table can drop a cell without showing it.
Only the store is read: thousands of MLflow queries would be slow and MLflow is not canonical.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from wdrbo_dist.run.records import SUMMED_COLUMNS
from wdrbo_dist.run.spec import RunSpec
from wdrbo_dist.storage.store import ResultStore

FINISHED, FAILED, MISSING = "finished", "failed", "missing"
STATUSES = (FINISHED, FAILED, MISSING)

RUN_TIMES = tuple(c for c in SUMMED_COLUMNS if c.endswith("_s"))  # the durations a run's row sums
CELL = ["fidelity", "problem", "algorithm"]


@dataclass(frozen=True)
class Metric:
    """Which regret the summaries show (method §5.4: both are stored, summaries say which)."""

    column: str = "regret"  # "regret": exact optimum; "regret_reference": published constant
    include_initial: bool = True  # count the initial design in the cumulative regret

    def __post_init__(self) -> None:
        if self.column not in ("regret", "regret_reference"):
            raise ValueError(f"metric column must be regret or regret_reference, got {self.column!r}")

    @property
    def description(self) -> str:
        against = (
            "the exact optimum of the fidelity profile" if self.column == "regret"
            else "the published reference constant (max_stochastic)"
        )
        design = "initial design included" if self.include_initial else "initial design excluded"
        return f"expected regret against {against}, {design}"


@dataclass
class StudyData:
    """The tidy view of one or more studies' stores."""

    name: str
    metric: Metric
    runs: pd.DataFrame  # one row per expected run
    steps: pd.DataFrame  # one row per step of every finished run
    problems: list[str] = field(default_factory=list)  # config order
    algorithms: list[str] = field(default_factory=list)  # config order
    fidelities: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    own_keys: frozenset[str] | None = None  # the first study's run keys when others are drawn beside it

    def counts(self) -> dict[str, int]:
        status = self.runs["status"].value_counts()
        return {"expected": int(len(self.runs)), **{s: int(status.get(s, 0)) for s in STATUSES}}

    def first_study(self) -> StudyData:
        """The runs of the study loaded first alone (itself when it was loaded alone): its own
        page says what it holds, not what a comparison drew beside it."""
        if self.own_keys is None:
            return self
        runs = self.runs[self.runs["run_key"].isin(self.own_keys)].reset_index(drop=True)
        own = runs.loc[runs["status"] == FINISHED, [*CELL, "seed"]]
        steps = self.steps.merge(own, on=[*CELL, "seed"], how="inner")[self.steps.columns]
        return StudyData(name=self.name, metric=self.metric, runs=runs, steps=steps.reset_index(drop=True),
                         problems=_unique(runs["problem"]), algorithms=_unique(runs["algorithm"]),
                         fidelities=_unique(runs["fidelity"]), seeds=sorted(_unique(runs["seed"])))


def _last_line(text: str | None) -> str:
    """The last non-empty line of a traceback: the exception and its message."""
    if not text:
        return ""
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[-1] if lines else ""


LATE_STEPS = 20  # a run's settled behaviour: its last 20 evaluations


def late_regret(regret_in_step_order: pd.Series, last: int = LATE_STEPS) -> float:
    """The mean instantaneous regret over a run's last `last` evaluations: what a method pays
    per step once it has settled (the toy figure's caption)."""
    return float(regret_in_step_order.iloc[-last:].mean())


STEP_INPUT = ("step", "is_initial", "regret", "regret_reference", "time_step_s", *RUN_TIMES)


def _read_records(store: ResultStore, key: str) -> pd.DataFrame:
    """Only the columns the analysis needs (much faster than whole records for big studies)."""
    return store.read_records(key, columns=STEP_INPUT)


@dataclass
class _Curves:
    """The curves of the finished runs that have `length` records, one row of each array per run
    (steps in order): what one run's records give, worked out for all of them at once."""

    keys: list[str]
    step: np.ndarray
    is_initial: np.ndarray
    keep: np.ndarray  # the steps the metric counts (all, or those after the initial design)
    regret: np.ndarray  # the metric's instantaneous regret r
    cumulative_regret: np.ndarray  # R: r summed over the kept steps
    elapsed_s: np.ndarray  # wall time since the run's start, the initial design included
    values: dict[str, np.ndarray]  # per run: the columns of the runs table


def _nan_to_zero_sum(values: np.ndarray) -> np.ndarray:
    """Row sums with NaN as 0, as pandas sums a column (numpy's pairwise sum of each row)."""
    return np.where(np.isnan(values), 0.0, values).sum(axis=1)


def _curves(frame: pd.DataFrame, walls: dict[str, float], metric: Metric) -> list[_Curves]:
    """Per run length, the curves and totals of the runs in `frame` (STEP_INPUT and `run_key`).

    Sums run along each run's steps in order (np.cumsum), as for a single run, so the figures do
    not depend on how many runs were loaded together."""
    if frame.empty:
        return []
    frame = frame.sort_values(["run_key", "step"], kind="stable")
    keys, starts, lengths = np.unique(frame["run_key"].to_numpy(dtype=str), return_index=True, return_counts=True)
    columns = {name: frame[name].to_numpy() for name in STEP_INPUT}
    out = []
    for length in np.unique(lengths):
        chosen = lengths == length
        rows = starts[chosen][:, None] + np.arange(length)[None, :]
        block = {name: values[rows] for name, values in columns.items()}
        initial = block["is_initial"].astype(bool)
        keep = np.ones_like(initial) if metric.include_initial else ~initial
        regret = block[metric.column].astype(float)
        cumulative = np.cumsum(np.where(keep, regret, 0.0), axis=1)  # adding 0 leaves a float sum as it is
        kept = keep.any(axis=1)
        last = length - 1 - np.argmax(keep[:, ::-1], axis=1)  # the last kept step of each run
        picked = np.arange(len(last))
        chosen_keys = [str(k) for k in keys[chosen]]
        step_time = block["time_step_s"].astype(float)
        wall = np.array([walls.get(k, 0.0) for k in chosen_keys])
        values = {
            "final_cumulative_regret": np.where(kept, cumulative[picked, last], np.nan),
            "final_regret": np.where(kept, regret[picked, last], np.nan),
            "wall_time_s": np.where(wall > 0, wall, _nan_to_zero_sum(step_time)),
            "n_steps": np.full(len(chosen_keys), int(length)),
            **{name: _nan_to_zero_sum(block[name].astype(float)) for name in RUN_TIMES},
        }
        out.append(_Curves(chosen_keys, block["step"].astype(int), initial, keep, regret, cumulative,
                           np.cumsum(step_time, axis=1), values))
    return out


STEP_COLUMNS = [*CELL, "seed", "step", "is_initial", "regret", "cumulative_regret", "elapsed_s"]


def load_runs(
    store: ResultStore, expected: Sequence[RunSpec], metric: Metric
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows for the expected runs (any status) and the per-step curves of the finished ones."""
    keys = [spec.run_key for spec in expected]
    loose = store.loose_keys()
    finished, failed = loose | store.compacted.keys(), store.failed_keys()
    # The compacted runs in one scan of the dataset, their wall times from its index; the loose
    # ones file by file (a file that cannot be read makes its run FAILED, with why).
    frames = [store.compacted.scan(set(keys) & (finished - loose), STEP_INPUT)]
    index = store.compacted.index()
    walls = dict(zip(index.index, index["wall_time_s"].astype(float)))
    unreadable: dict[str, str] = {}
    for key in sorted(set(keys) & loose):
        try:
            frames.append(_read_records(store, key).assign(run_key=key))
            walls[key] = float(store.read_meta(key).get("wall_time_s") or 0.0)
        except Exception as exc:  # a damaged file is a failure to show, not to hide
            unreadable[key] = f"unreadable result: {type(exc).__name__}: {exc}"
    groups = _curves(pd.concat([f for f in frames if not f.empty] or frames[:1], ignore_index=True), walls, metric)
    where = {key: (g, i) for g, group in enumerate(groups) for i, key in enumerate(group.keys)}
    rows: list[dict[str, Any]] = []
    shown: list[tuple[int, int, int]] = []  # (row, group, run in group) of each finished run
    for spec, key in zip(expected, keys):
        row: dict[str, Any] = {
            "fidelity": spec.fidelity, "problem": spec.problem, "algorithm": spec.algorithm_label,
            "seed": int(spec.seed), "run_key": key, "label": spec.label, "status": MISSING, "error": "",
        }
        if key in unreadable:
            row.update(status=FAILED, error=unreadable[key])
        elif key in where:
            g, i = where[key]
            row.update(status=FINISHED, **{name: values[i] for name, values in groups[g].values.items()})
            shown.append((len(rows), g, i))
        elif key in failed:
            try:
                error = _last_line(store.read_meta(key).get("error")) or "failed (no error text)"
            except Exception as exc:
                error = f"failed (unreadable failure record: {type(exc).__name__})"
            row.update(status=FAILED, error=error)
        rows.append(row)
    columns = [*CELL, "seed", "run_key", "label", "status", "error", "final_cumulative_regret",
               "final_regret", "wall_time_s", *RUN_TIMES, "n_steps"]
    runs = pd.DataFrame(rows).reindex(columns=columns)
    runs["n_steps"] = runs["n_steps"].astype("Int64")
    return runs, _stack_curves(runs, groups, shown)


def _stack_curves(runs: pd.DataFrame, groups: list[_Curves], shown: list[tuple[int, int, int]]) -> pd.DataFrame:
    """One row per kept step of the finished runs, in the runs' order (one concatenation)."""
    if not shown:
        return pd.DataFrame({c: pd.Series(dtype=object if c in CELL else float) for c in STEP_COLUMNS})
    parts: dict[str, list[np.ndarray]] = {name: [] for name in STEP_COLUMNS}
    order: list[np.ndarray] = []
    for g, group in enumerate(groups):
        members = [(row, i) for row, gg, i in shown if gg == g]
        if not members:
            continue
        at, picked = np.array([row for row, _ in members]), np.array([i for _, i in members])
        keep = group.keep[picked]
        counts = keep.sum(axis=1)
        for name in (*CELL, "seed"):
            parts[name].append(np.repeat(runs[name].to_numpy()[at], counts))
        for name in ("step", "is_initial", "regret", "cumulative_regret", "elapsed_s"):
            parts[name].append(getattr(group, name)[picked][keep])
        order.append(np.repeat(at, counts))
    rank = np.argsort(np.concatenate(order), kind="stable")  # runs in order, each run's steps in order
    frame = pd.DataFrame({name: np.concatenate(values)[rank] for name, values in parts.items()})
    for name in CELL:
        frame[name] = frame[name].astype(str)
    frame["seed"] = frame["seed"].astype(int)
    return frame


def _unique(values: Iterable[Any]) -> list[Any]:
    """The distinct values in order of first appearance (one pass: a study has 10^5 seeds' rows)."""
    return list(dict.fromkeys(values))


def load_study(studies: Sequence[Any], metric: Metric | None = None) -> StudyData:
    """Load one study (or several, e.g. the same study in both fidelity profiles).

    Each element needs `name`, `output_dir` and `runs` (a `StudySpec`). The first names the
    result; problems and algorithms keep the configs' order.
    """
    if not studies:
        raise ValueError("load_study needs at least one study")
    metric = metric or Metric()
    all_runs, all_steps = [], []
    for study in studies:
        runs, steps = load_runs(ResultStore(study.output_dir), study.runs, metric)
        all_runs.append(runs)
        all_steps.append(steps)
    runs = pd.concat(all_runs, ignore_index=True)
    runs = runs.drop_duplicates(subset=["run_key"], keep="first").reset_index(drop=True)
    non_empty = [s for s in all_steps if not s.empty]
    steps = pd.concat(non_empty, ignore_index=True) if non_empty else all_steps[0]
    steps = steps.reindex(columns=STEP_COLUMNS)
    steps = steps.drop_duplicates(subset=[*CELL, "seed", "step"], keep="first").reset_index(drop=True)
    return StudyData(
        name=studies[0].name,
        metric=metric,
        runs=runs,
        steps=steps,
        problems=_unique(runs["problem"]),
        algorithms=_unique(runs["algorithm"]),
        fidelities=_unique(runs["fidelity"]),
        seeds=sorted(_unique(runs["seed"])),
        own_keys=frozenset(spec.run_key for spec in studies[0].runs) if len(studies) > 1 else None,
    )
