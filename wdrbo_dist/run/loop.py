"""One algorithm x problem x seed: `RunSpec` in, `RunResult` out.

`run_one` is the pure function every backend maps. It is deterministic given its spec:
every random draw comes from CPU generators seeded from the spec (separate streams for the
initial design, the environment and the algorithm, so that all algorithms of one seed see
the same design and the same context stream: paired comparisons), never from global state.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import torch
from threadpoolctl import threadpool_limits
from torch import Tensor

from wdrbo_dist.models.settings import NumericalSettings
from wdrbo_dist.run.records import NO_TELEMETRY, Step, records_from_steps
from wdrbo_dist.run.spec import RunResult, RunSpec, validate_spec

STREAMS = ("design", "environment", "algorithm", "setup")

# What this process has warmed up: (algorithm, problem, fidelity, device). A process's first run
# of a cell pays about a second of lazy imports, compilation and first-call set-up that its next
# runs do not; `warm_up` pays it before the clock starts, so a run's time is its own.
_WARMED: set[tuple[str, str, str, str]] = set()


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
    """Run one algorithm x problem x seed. With `capture_errors`, an exception gives a FAILED result.

    The first run of a cell in a process warms up first (`warm_up`): the time that takes is in
    `RunResult.warm_up_s`, not in `wall_time_s` or the per-step times.
    """
    warm_up_s = warm_up(spec)
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
            warm_up_s=warm_up_s,
        )
    return RunResult(spec=spec, status="FINISHED", records=records, options=options,
                     wall_time_s=time.perf_counter() - t0, started_at=started, warm_up_s=warm_up_s)


def warm_up(spec: RunSpec) -> float:
    """Run one BO step of `spec`'s cell, unless this process has run that cell before; its seconds.

    The step is thrown away. Every draw of a run comes from generators seeded from its spec, so
    the warm-up changes none of the run's records (a test holds it). Its errors are left to the
    run itself to report.
    """
    cell = (spec.algorithm, spec.problem, spec.fidelity, spec.device)
    if cell in _WARMED:
        return 0.0
    _WARMED.add(cell)
    start = time.perf_counter()
    try:
        options = validate_spec(spec)
        with threadpool_limits(limits=1, user_api="blas"):
            _bayesian_optimisation(replace(spec, evaluations=spec.init_size + 1), options, False)
    except Exception:  # noqa: BLE001 - the run reports its own errors
        pass
    return time.perf_counter() - start


def _bayesian_optimisation(spec: RunSpec, options: dict[str, Any], progress: bool) -> pd.DataFrame:
    from wdrbo_dist.acquisition.base import BOState
    from wdrbo_dist.acquisition.model_free import ModelFreeAlgorithm
    from wdrbo_dist.acquisition.optimize import maximize_acquisition
    from wdrbo_dist.acquisition.registry import make_algorithm
    from wdrbo_dist.acquisition.sobol import scrambled_sobol
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
    model_free = isinstance(algorithm, ModelFreeAlgorithm)  # no GP, no acquisition: it proposes x itself
    settings = None if model_free else algorithm.optimizer_settings()
    for _ in range(spec.init_size, spec.evaluations):
        start = time.perf_counter()
        state = BOState(torch.stack(xs), torch.stack(cs), torch.stack(ys))
        if model_free:
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
            assert settings is not None
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
