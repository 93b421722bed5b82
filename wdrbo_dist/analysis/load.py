"""Store -> tidy frames: one row per expected run (with its status) and one row per step.

The study config says which runs should exist; the parquet store says which did. Every
expected run gets a row with status `finished`, `failed` or `missing` (an unreadable record
file counts as failed, with the reason), so that no table can drop a cell without showing it.
Only the store is read: thousands of MLflow queries would be slow and MLflow is not canonical.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from wdrbo_dist.records import SUMMED_COLUMNS
from wdrbo_dist.run import RunSpec
from wdrbo_dist.store import ResultStore

FINISHED, FAILED, MISSING = "finished", "failed", "missing"
STATUSES = (FINISHED, FAILED, MISSING)

RUN_TIMES = tuple(c for c in SUMMED_COLUMNS if c.endswith("_s"))  # the durations a run's row sums
CELL = ["fidelity", "problem", "algorithm"]


@dataclass(frozen=True)
class Metric:
    """Which regret the summaries show (spec 5.4: both are stored, summaries say which)."""

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

    def counts(self) -> dict[str, int]:
        status = self.runs["status"].value_counts()
        return {"expected": int(len(self.runs)), **{s: int(status.get(s, 0)) for s in STATUSES}}


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


def per_step(records: pd.DataFrame, metric: Metric) -> dict[str, np.ndarray]:
    """The curves of one run: instantaneous regret r, cumulative regret R, elapsed wall time.

    Elapsed time counts every step (the initial design too: it is wall-clock time spent);
    R restarts after the design when the metric excludes it.
    """
    frame = records.sort_values("step")
    elapsed = np.cumsum(frame["time_step_s"].to_numpy(dtype=float))
    initial = frame["is_initial"].to_numpy(dtype=bool)
    keep = np.ones(len(frame), dtype=bool) if metric.include_initial else ~initial
    r = frame[metric.column].to_numpy(dtype=float)[keep]
    return {
        "step": frame["step"].to_numpy(dtype=int)[keep],
        "is_initial": initial[keep],
        "regret": r,
        "cumulative_regret": np.cumsum(r),
        "elapsed_s": elapsed[keep],
    }


def _read_records(store: ResultStore, key: str) -> pd.DataFrame:
    """Only the columns the analysis needs (much faster than whole records for big studies)."""
    return store.read_records(key, columns=STEP_INPUT)


def _finished_row(records: pd.DataFrame, meta: dict[str, Any], metric: Metric) -> tuple[dict, dict[str, np.ndarray]]:
    curve = per_step(records, metric)
    wall = float(meta.get("wall_time_s") or 0.0)
    if not wall > 0:
        wall = float(records["time_step_s"].sum())
    n = len(curve["step"])
    row: dict[str, Any] = {
        "final_cumulative_regret": float(curve["cumulative_regret"][-1]) if n else math.nan,
        "final_regret": float(curve["regret"][-1]) if n else math.nan,
        "wall_time_s": wall,
        "n_steps": int(len(records)),
    }
    for column in RUN_TIMES:
        row[column] = float(records[column].sum())
    return row, curve


STEP_COLUMNS = [*CELL, "seed", "step", "is_initial", "regret", "cumulative_regret", "elapsed_s"]


def load_runs(
    store: ResultStore, expected: Sequence[RunSpec], metric: Metric
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rows for the expected runs (any status) and the per-step curves of the finished ones."""
    loose = store.loose_keys()
    finished, failed = loose | store.compacted.keys(), store.failed_keys()
    # The compacted runs in one scan of the dataset; the loose ones file by file.
    compacted = store.compacted.scan({s.run_key for s in expected} & (finished - loose), STEP_INPUT)
    index = store.compacted.index()
    rows: list[dict[str, Any]] = []
    curves: list[tuple[dict[str, Any], dict[str, np.ndarray]]] = []
    for spec in expected:
        key = spec.run_key
        row: dict[str, Any] = {
            "fidelity": spec.fidelity,
            "problem": spec.problem,
            "algorithm": spec.algorithm_label,
            "seed": int(spec.seed),
            "run_key": key,
            "label": spec.label,
            "status": MISSING,
            "error": "",
        }
        if key in finished:
            try:
                if key in compacted:
                    records, meta = compacted[key], {"wall_time_s": float(index.at[key, "wall_time_s"])}
                else:
                    records, meta = _read_records(store, key), store.read_meta(key)
                values, curve = _finished_row(records, meta, metric)
            except Exception as exc:  # a damaged file is a failure to show, not to hide
                row.update(status=FAILED, error=f"unreadable result: {type(exc).__name__}: {exc}")
            else:
                row.update(status=FINISHED, **values)
                curves.append((row, curve))
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
    return runs, _stack_curves(curves)


def _stack_curves(curves: list[tuple[dict[str, Any], dict[str, np.ndarray]]]) -> pd.DataFrame:
    """One frame from many runs' arrays (one concatenation, not one frame per run)."""
    if not curves:
        return pd.DataFrame({c: pd.Series(dtype=object if c in CELL else float) for c in STEP_COLUMNS})
    lengths = [len(curve["step"]) for _, curve in curves]
    data: dict[str, Any] = {}
    for name in (*CELL, "seed"):
        data[name] = np.repeat(np.array([row[name] for row, _ in curves], dtype=object if name in CELL else int),
                               lengths)
    for name in STEP_COLUMNS[len(CELL) + 1:]:
        data[name] = np.concatenate([curve[name] for _, curve in curves])
    frame = pd.DataFrame(data)
    for name in CELL:
        frame[name] = frame[name].astype(str)
    return frame


def _unique(values: Iterable[Any]) -> list[Any]:
    seen: list[Any] = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


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
    )
