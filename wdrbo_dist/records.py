"""The per-evaluation record schema shared by the run loop, the store and the analysis.

One row per function evaluation (initial design included and marked), so that any curve
(instantaneous or cumulative regret, with or without the initial design, against the exact
optimum or the published constant) can be rebuilt from the stored rows alone (spec 5.4).
"""

from __future__ import annotations

# Always present, in this order; then x_0..x_{d_x-1} and c_0..c_{d_c-1}.
CORE_COLUMNS: tuple[str, ...] = (
    "step",  # 1-based evaluation index t = 1..evaluations
    "is_initial",  # True for the initial design
    "n_observations",  # observations the learner had when it chose this x (0 for the design)
    "y",  # observed f(x_t, c_t)
    "expected_value",  # E_{c~P*}[f(x_t, c)] by the problem's QMC rule
    "regret",  # optimal_value - expected_value (exact optimum of this fidelity profile)
    "regret_reference",  # reference_optimal_value - expected_value (published constant)
    "cumulative_regret",  # running sum of `regret`, initial design included
    "cumulative_regret_reference",  # running sum of `regret_reference`
    "best_y",  # the largest observed y so far
    "radius",  # the algorithm's ambiguity radius at this step (NaN where it has none)
    "time_fit_s",  # GP fit
    "time_acquisition_s",  # acquisition maximisation (inner solves included)
    "time_truth_s",  # the QMC expectation of this step (book-keeping, not algorithm time)
    "time_step_s",  # wall time of the whole step
    "acquisition_calls",  # acquisition evaluations (raw screening + Adam steps + final)
    "adam_steps",  # Adam iterations of the local optimisation
    "fit_attempts",  # GP fit attempts (retries after a failed L-BFGS-B)
    "inner_solves",  # conic solves (DRBO-MMD) or closed-form inner problems
    "inner_programs",  # conic programs solved for them (DRBO-MMD: working-set + complete; 0: closed forms)
    "inner_failures",  # inner solves that returned no solution
    "inner_fallbacks",  # times the fallback of spec 3.6 was used
    "inner_solve_s",  # seconds spent in inner solves
)


def x_columns(dim_x: int) -> list[str]:
    return [f"x_{i}" for i in range(dim_x)]


def c_columns(dim_c: int) -> list[str]:
    return [f"c_{i}" for i in range(dim_c)]
