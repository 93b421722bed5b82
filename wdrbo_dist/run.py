"""One algorithm x problem x seed: `RunSpec` in, `RunResult` out.

`run_one` is the pure function every backend maps. It is deterministic given its spec:
every random draw comes from CPU generators seeded from the spec (separate streams for the
initial design, the environment and the algorithm, so that all algorithms of one seed see
the same design and the same context stream: paired comparisons), never from global state.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch
from threadpoolctl import threadpool_limits
from torch import Tensor

from wdrbo_dist import __version__
from wdrbo_dist.records import NO_TELEMETRY, SUMMED_COLUMNS, Step, records_from_steps
from wdrbo_dist.settings import NumericalSettings

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
    from wdrbo_dist.algorithms import ALGORITHMS
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
    from wdrbo_dist.algorithms import get_algorithm_class

    return get_algorithm_class(spec.algorithm).resolve_options(spec.fidelity, spec.options_dict)


def check_device(device: str) -> None:
    """Raise ValueError unless `device` names an available torch device (cpu, cuda, cuda:N)."""
    allowed = ["cpu"]
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        allowed += ["cuda"] + [f"cuda:{i}" for i in range(count)]
    if device not in allowed:
        raise ValueError(f"device: {device!r} is not available here; allowed: {', '.join(allowed)}")


# --------------------------------------------------------------------------------------------
# The BO loop

STREAMS = ("design", "environment", "algorithm", "setup")


def make_generators(seed: int) -> dict[str, torch.Generator]:
    """Independent CPU generators per purpose, derived from the seed.

    The design and environment streams do not depend on the algorithm, so every algorithm of
    one seed sees the same initial design and the same sequence of environment draws.
    """
    generators = {}
    for index, stream in enumerate(STREAMS):
        state = np.random.SeedSequence(entropy=seed, spawn_key=(index,)).generate_state(1, np.uint64)[0]
        generators[stream] = torch.Generator().manual_seed(int(state) & (2**63 - 1))
    return generators


def run_one(spec: RunSpec, progress: bool = False, capture_errors: bool = True) -> RunResult:
    """Run one algorithm x problem x seed. With `capture_errors`, an exception gives a FAILED result."""
    started = time.time()
    t0 = time.perf_counter()
    options: dict[str, Any] = {}
    try:
        options = validate_spec(spec)
        # NumPy's BLAS only sees n <= a few hundred matrices here; its threads cost far more
        # than they save, and spin against torch's (measured: 8 ms vs 0.2 ms per GP objective).
        with threadpool_limits(limits=1, user_api="blas"):
            records = _bayesian_optimisation(spec, options, progress)
    except Exception:
        if not capture_errors:
            raise
        return RunResult(
            spec=spec,
            status="FAILED",
            error=traceback.format_exc(),
            options=options,
            wall_time_s=time.perf_counter() - t0,
            started_at=started,
        )
    return RunResult(spec=spec, status="FINISHED", records=records, options=options,
                     wall_time_s=time.perf_counter() - t0, started_at=started)


def _bayesian_optimisation(spec: RunSpec, options: dict[str, Any], progress: bool) -> pd.DataFrame:
    from wdrbo_dist.acquisition.base import BOState
    from wdrbo_dist.acquisition.model_free import ModelFreeAlgorithm
    from wdrbo_dist.acquisition.optimize import maximize_acquisition
    from wdrbo_dist.acquisition.sobol import scrambled_sobol
    from wdrbo_dist.algorithms import make_algorithm
    from wdrbo_dist.models.fit import fit_gp
    from wdrbo_dist.problems import make_problem

    device = torch.device(spec.device)
    numerics = NumericalSettings.for_run(spec.device)  # the run's routes, made once
    problem = make_problem(spec.problem, spec.fidelity)
    algorithm = make_algorithm(spec.algorithm, problem, spec.fidelity, options)
    gens = make_generators(spec.seed)
    lower, upper = problem.decision_bounds[0], problem.decision_bounds[1]
    span = upper - lower
    _, optimal_value = problem.optimum()
    reference_value = float(problem.reference_optimal_value)
    unit_bounds = torch.stack([torch.zeros(problem.dim_x), torch.ones(problem.dim_x)]).to(device, torch.float64)

    xs: list[Tensor] = []  # unit-box decisions: the learner's data
    cs: list[Tensor] = []
    ys: list[Tensor] = []
    steps: list[Step] = []

    def evaluate(x_unit: Tensor) -> tuple[list[float], list[float], float, float, float]:
        """Observe f at x (a fresh context) and compute its truth; the learner's data grow."""
        x_real = (lower + span * x_unit.cpu()).unsqueeze(0)
        obs = problem.observe(x_real, gens["environment"])
        t_truth = time.perf_counter()
        expected = float(problem.expected_value(x_real.to(device))[0])
        time_truth = time.perf_counter() - t_truth
        xs.append(x_unit.cpu())
        cs.append(obs.context[0].to(torch.float64))
        ys.append(obs.y[0].to(torch.float64))
        return x_real[0].tolist(), obs.context[0].tolist(), float(obs.y[0]), expected, time_truth

    design = scrambled_sobol(spec.init_size, problem.dim_x, gens["design"])
    for x_unit in design:
        start = time.perf_counter()
        x, c, y, expected, time_truth = evaluate(x_unit)
        timings = {"time_fit_s": 0.0, "time_acquisition_s": 0.0, "time_truth_s": time_truth}
        steps.append(Step(x, c, y, expected, is_initial=True, n_observations=0, radius=math.nan,
                          timings=timings | {"time_step_s": time.perf_counter() - start}))

    state = BOState(torch.stack(xs), torch.stack(cs), torch.stack(ys))
    algorithm.setup(state, gens["setup"])
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=spec.evaluations, initial=spec.init_size, desc=spec.label, unit="eval")
    settings = algorithm.optimizer_settings()
    for _ in range(spec.init_size, spec.evaluations):
        start = time.perf_counter()
        state = BOState(torch.stack(xs), torch.stack(cs), torch.stack(ys))
        if isinstance(algorithm, ModelFreeAlgorithm):  # no GP, no acquisition: it proposes x itself
            t = time.perf_counter()
            x_next = algorithm.propose(state, gens["algorithm"])
            time_fit, time_acq, radius, telemetry = 0.0, time.perf_counter() - t, math.nan, dict(NO_TELEMETRY)
        else:
            inputs = torch.cat([state.x, state.context], dim=-1) if algorithm.uses_context else state.x
            t = time.perf_counter()
            model, fit = fit_gp(inputs.to(device), state.y.to(device), gens["algorithm"], numerics)
            time_fit = time.perf_counter() - t
            t = time.perf_counter()
            acquisition = algorithm.acquisition(model, state, gens["algorithm"])
            x_next, _, stats = maximize_acquisition(acquisition, unit_bounds, settings, gens["algorithm"])
            time_acq = time.perf_counter() - t
            tel, radius = acquisition.telemetry, float(acquisition.radius)
            telemetry = {
                "acquisition_calls": stats.acquisition_calls, "adam_steps": stats.adam_steps,
                "fit_attempts": fit.attempts, "inner_solves": tel.solves, "inner_programs": tel.programs,
                "inner_failures": tel.failures, "inner_fallbacks": tel.fallbacks, "inner_solve_s": tel.seconds,
            }
        x, c, y, expected, time_truth = evaluate(x_next)
        timings = {"time_fit_s": time_fit, "time_acquisition_s": time_acq, "time_truth_s": time_truth}
        steps.append(Step(x, c, y, expected, is_initial=False, n_observations=state.n,
                          radius=radius, telemetry=telemetry,
                          timings=timings | {"time_step_s": time.perf_counter() - start}))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(regret=f"{optimal_value - expected:.3g}")
    if bar is not None:
        bar.close()
    return records_from_steps(steps, optimal_value, reference_value, problem.dim_x, problem.dim_c)
