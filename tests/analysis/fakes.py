"""Constructed studies with known answers: records written through the real ResultStore."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from wdrbo_dist.run.records import CORE_COLUMNS
from wdrbo_dist.run.spec import RunResult, RunSpec
from wdrbo_dist.storage.store import ResultStore
from wdrbo_dist.study.spec import AlgorithmSettings, StudySpec


def make_records(regret: Iterable[float], init_size: int = 2, step_time: float = 0.5,
                 offset: float = 0.25) -> pd.DataFrame:
    """Records with the given per-step regret (regret_reference = regret + offset).

    Per step: fit 0.1 s, acquisition 0.2 s (of which inner 0.05 s), truth 0.1 s, so that the
    time split is known: step_time - 0.4 s is 'other'.
    """
    r = np.asarray(list(regret), dtype=float)
    n = r.size
    frame = pd.DataFrame({column: np.zeros(n) for column in CORE_COLUMNS})
    frame["step"] = np.arange(1, n + 1)
    frame["is_initial"] = frame["step"] <= init_size
    frame["n_observations"] = np.maximum(frame["step"] - 1, 0)
    frame["expected_value"] = 1.0 - r
    frame["y"] = 1.0 - r
    frame["regret"] = r
    frame["regret_reference"] = r + offset
    frame["cumulative_regret"] = np.cumsum(r)
    frame["cumulative_regret_reference"] = np.cumsum(r + offset)
    frame["best_y"] = np.maximum.accumulate(frame["y"])
    frame["radius"] = np.nan
    frame["time_fit_s"] = 0.1
    frame["time_acquisition_s"] = 0.2
    frame["inner_solve_s"] = 0.05
    frame["time_truth_s"] = 0.1
    frame["time_step_s"] = step_time
    frame["x_0"] = 0.5
    frame["c_0"] = 0.5
    return frame


def make_study(tmp_path: Path, problems: list[str], algorithms: list[str], seeds: list[int],
               evaluations: int = 6, init_size: int = 2, fidelity: str = "paper",
               name: str = "fake", tracking_uri: str = "none") -> StudySpec:
    return StudySpec(
        name=name,
        fidelity=fidelity,
        problems=problems,
        algorithm_settings=[AlgorithmSettings(name=a) for a in algorithms],
        seeds=seeds,
        evaluations=evaluations,
        init_size=init_size,
        backend="serial",
        workers=1,
        tracking_uri=tracking_uri,
        output_dir=tmp_path / f"results-{name}",
    )


RegretFn = Callable[[RunSpec], Iterable[float] | str | None]


def fill_store(study: StudySpec, regret_of: RegretFn, wall_time: float | None = None) -> ResultStore:
    """Save every run of `study`: `regret_of(spec)` gives its per-step regret, or the string
    'fail' for a failed run, or None to leave the run missing."""
    store = ResultStore(study.output_dir)
    for spec in study.runs:
        outcome = regret_of(spec)
        if outcome is None:
            continue
        if isinstance(outcome, str):
            store.save(RunResult(spec=spec, status="FAILED",
                                 error=f"Traceback (most recent call last):\n  ...\nRuntimeError: {outcome}"))
            continue
        records = make_records(outcome, init_size=spec.init_size)
        wall = wall_time if wall_time is not None else float(records["time_step_s"].sum())
        store.save(RunResult(spec=spec, status="FINISHED", records=records, wall_time_s=wall))
    return store
