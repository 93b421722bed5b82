"""One algorithm x problem x seed: `RunSpec` in, `RunResult` out.

`run_one` is the pure function every backend maps. It is deterministic given its spec:
every random draw comes from CPU generators seeded from the spec (separate streams for the
initial design, the environment and the algorithm, so that all algorithms of one seed see
the same design and the same context stream: paired comparisons), never from global state.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from wdrbo_dist import __version__
from wdrbo_dist.records import CORE_COLUMNS, c_columns, x_columns

OptionValue = bool | int | float | str


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines a run's records (and so its run key)."""

    algorithm: str
    problem: str
    seed: int
    evaluations: int = 100
    init_size: int = 5
    fidelity: str = "paper"
    options: tuple[tuple[str, OptionValue], ...] = ()
    device: str = "cpu"  # where tensors live; not part of the run key (records are identical)
    study: str = ""  # the study this run belongs to; not part of the run key

    @staticmethod
    def make(options: Mapping[str, OptionValue] | None = None, **kwargs: Any) -> "RunSpec":
        """Build a spec with `options` given as a mapping (stored sorted, so hashing is stable)."""
        return RunSpec(options=tuple(sorted((options or {}).items())), **kwargs)

    @property
    def options_dict(self) -> dict[str, OptionValue]:
        return dict(self.options)

    def identity(self) -> dict[str, Any]:
        """The content that defines the run (the package version included)."""
        return {
            "algorithm": self.algorithm,
            "problem": self.problem,
            "seed": self.seed,
            "evaluations": self.evaluations,
            "init_size": self.init_size,
            "fidelity": self.fidelity,
            "options": {k: v for k, v in self.options},
            "version": __version__,
        }

    @property
    def run_key(self) -> str:
        """A content hash of the run's full spec: equal keys mean equal records."""
        payload = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        """The human name of the run, as shown in MLflow: `problem|algorithm|s<seed>`."""
        return f"{self.problem}|{self.algorithm}|s{self.seed}"


@dataclass
class RunResult:
    """The outcome of one run: its records and telemetry, or its error."""

    spec: RunSpec
    status: str  # "FINISHED" or "FAILED"
    records: pd.DataFrame | None = None
    error: str | None = None  # the traceback of a failed run
    wall_time_s: float = 0.0
    started_at: float = 0.0  # unix time
    host: str = field(default_factory=lambda: os.uname().nodename)
    pid: int = field(default_factory=os.getpid)

    @property
    def ok(self) -> bool:
        return self.status == "FINISHED"

    def summary(self) -> dict[str, float]:
        """Final metrics of a finished run (what the tracker logs as run-level metrics)."""
        if self.records is None or self.records.empty:
            return {"wall_time_s": self.wall_time_s}
        r = self.records
        return {
            "final_cumulative_regret": float(r["cumulative_regret"].iloc[-1]),
            "final_cumulative_regret_reference": float(r["cumulative_regret_reference"].iloc[-1]),
            "final_regret": float(r["regret"].iloc[-1]),
            "best_y": float(r["best_y"].iloc[-1]),
            "wall_time_s": self.wall_time_s,
            "time_fit_s": float(r["time_fit_s"].sum()),
            "time_acquisition_s": float(r["time_acquisition_s"].sum()),
            "time_truth_s": float(r["time_truth_s"].sum()),
            "inner_solve_s": float(r["inner_solve_s"].sum()),
            "inner_solves": float(r["inner_solves"].sum()),
            "inner_failures": float(r["inner_failures"].sum()),
        }
