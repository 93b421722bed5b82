"""A run's spec and result: `RunSpec` (frozen, keyed by a hash of what the user gave) and `RunResult`.

`validate_spec` checks a spec without running it, so the driver refuses bad input before any work;
`resolved_options` is the one place an algorithm's options are resolved for a run.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import torch

from wdrbo_dist import __version__
from wdrbo_dist.run.records import SUMMED_COLUMNS

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
    # The study's name for this algorithm with these options, when it runs the algorithm more
    # than once (a variant); not part of the run key (the options are).
    variant: str = ""

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

    @functools.cached_property
    def run_key(self) -> str:
        """A content hash of the run's full spec: equal keys mean equal records (worked out
        once per spec: the driver asks for it a dozen times per run)."""
        payload = json.dumps(self.identity(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        """The human name of the run, as shown in MLflow: `problem|algorithm|s<seed>`."""
        return f"{self.problem}|{self.algorithm_label}|s{self.seed}"

    @property
    def algorithm_label(self) -> str:
        """What tables, figures and MLflow call the algorithm of this run: its variant's label."""
        return self.variant or self.algorithm


@dataclass
class RunResult:
    """The outcome of one run: its records and telemetry, or its error."""

    spec: RunSpec
    status: str  # "FINISHED" or "FAILED"
    records: pd.DataFrame | None = None
    error: str | None = None  # the traceback of a failed run
    options: dict[str, Any] = field(default_factory=dict)  # as resolved by `resolved_options`
    wall_time_s: float = 0.0
    started_at: float = 0.0  # unix time
    warm_up_s: float = 0.0  # the process's first run of the cell: its warm-up, before wall_time_s
    host: str = field(default_factory=lambda: os.uname().nodename)
    pid: int = field(default_factory=os.getpid)
    # The records as the store's parquet file, encoded where the run ran (the study's workers do
    # it: `run_files.encoded_run`), so that the driver only writes bytes; None: the store encodes them.
    records_parquet: bytes | None = field(default=None, repr=False)
    _summary: dict[str, float] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.status == "FINISHED"

    def summary(self) -> dict[str, float]:
        """Final metrics of a finished run (what the tracker logs as run-level metrics); worked
        out once, where the run ran when the study encodes it there (`run_files.encoded_run`)."""
        if self.records is None or self.records.empty:
            return {"wall_time_s": self.wall_time_s}
        if self._summary is None:
            self._summary = self._totals()
        return {**self._summary, "wall_time_s": self.wall_time_s}

    def _totals(self) -> dict[str, float]:
        r = self.records
        assert r is not None
        return {
            "final_cumulative_regret": float(r["cumulative_regret"].iloc[-1]),
            "final_cumulative_regret_reference": float(r["cumulative_regret_reference"].iloc[-1]),
            "final_regret": float(r["regret"].iloc[-1]),
            "best_y": float(r["best_y"].iloc[-1]),
            "wall_time_s": self.wall_time_s,
            **{column: float(r[column].sum()) for column in SUMMED_COLUMNS},
        }


# --------------------------------------------------------------------------------------------
# Validation

def validate_spec(spec: RunSpec) -> dict[str, Any]:
    """The run's resolved options; ValueError naming the bad field and its allowed values.

    Does no work beyond the check, so a driver calls it on every run before starting any.
    """
    from wdrbo_dist.acquisition.registry import ALGORITHMS
    from wdrbo_dist.problems import PROBLEMS
    from wdrbo_dist.problems.base import FIDELITIES

    if spec.algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm: unknown {spec.algorithm!r}; allowed: {', '.join(ALGORITHMS)}")
    if spec.problem not in PROBLEMS:
        raise ValueError(f"problem: unknown {spec.problem!r}; allowed: {', '.join(PROBLEMS)}")
    if spec.fidelity not in FIDELITIES:
        raise ValueError(f"fidelity: unknown {spec.fidelity!r}; allowed: {', '.join(FIDELITIES)}")
    if not isinstance(spec.seed, int) or isinstance(spec.seed, bool) or spec.seed < 0:
        raise ValueError(f"seed: must be an integer >= 0, got {spec.seed!r}")
    if not isinstance(spec.init_size, int) or spec.init_size < 1:
        raise ValueError(f"init_size: must be an integer >= 1, got {spec.init_size!r}")
    if not isinstance(spec.evaluations, int) or spec.evaluations <= spec.init_size:
        raise ValueError(
            f"evaluations: must be an integer > init_size ({spec.init_size}), got {spec.evaluations!r}"
        )
    options = resolved_options(spec)
    check_device(spec.device)
    return options


def resolved_options(spec: RunSpec) -> dict[str, Any]:
    """Every option the run uses: the profile's defaults overridden by what the user gave.

    The one place options are resolved: validation, `run_one` (which returns them with the
    result, for the store and the tracker) and the scheduler's cost estimate all call it. The
    run key still hashes only what the user gave, so adding an option keeps stored runs valid.
    """
    from wdrbo_dist.acquisition.registry import get_algorithm_class

    return get_algorithm_class(spec.algorithm).resolve_options(spec.fidelity, spec.options_dict)


def check_device(device: str) -> None:
    """Raise ValueError unless `device` names an available torch device (cpu, cuda, cuda:N)."""
    allowed = ["cpu"]
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        allowed += ["cuda"] + [f"cuda:{i}" for i in range(count)]
    if device not in allowed:
        raise ValueError(f"device: {device!r} is not available here; allowed: {', '.join(allowed)}")
