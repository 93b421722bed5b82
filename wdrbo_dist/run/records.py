"""The per-evaluation record schema shared by the run loop, the store and the analysis.

One row per function evaluation (initial design included and marked), so that any curve
(instantaneous or cumulative regret, with or without the initial design, against the exact
optimum or the published constant) can be rebuilt from the stored rows alone (method §5.4).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate

import pandas as pd

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
    "inner_fallbacks",  # times the fallback of method §3.6 was used
    "inner_solve_s",  # seconds spent in inner solves
)


def x_columns(dim_x: int) -> list[str]:
    return [f"x_{i}" for i in range(dim_x)]


def c_columns(dim_c: int) -> list[str]:
    return [f"c_{i}" for i in range(dim_c)]


# Column groups, each a part of CORE_COLUMNS (the one list): per-step timings, the learner's
# telemetry, and the run totals a summary sums over steps.
TIME_COLUMNS: tuple[str, ...] = ("time_fit_s", "time_acquisition_s", "time_truth_s", "time_step_s")
TELEMETRY_COLUMNS: tuple[str, ...] = (
    "acquisition_calls", "adam_steps", "fit_attempts", "inner_solves", "inner_programs", "inner_failures",
    "inner_fallbacks", "inner_solve_s",
)
SUMMED_COLUMNS: tuple[str, ...] = (
    "time_fit_s", "time_acquisition_s", "time_truth_s", "inner_solve_s", "inner_solves", "inner_programs",
    "inner_failures",
)
# What measures the machine, not the run: left out wherever records are compared.
MACHINE_COLUMNS: tuple[str, ...] = (*TIME_COLUMNS, "inner_solve_s")
assert set(TIME_COLUMNS + TELEMETRY_COLUMNS + SUMMED_COLUMNS + MACHINE_COLUMNS) <= set(CORE_COLUMNS)
NO_TELEMETRY: dict[str, float] = {c: 0.0 if c.endswith("_s") else 0 for c in TELEMETRY_COLUMNS}  # the initial design


@dataclass
class Step:
    """One evaluation as the BO loop saw it, before any book-keeping (regret, sums, best y)."""

    x: list[float]  # the decision, in the problem's units
    context: list[float]  # the context the environment drew
    y: float
    expected_value: float
    is_initial: bool
    n_observations: int
    radius: float
    timings: dict[str, float]  # the TIME_COLUMNS
    telemetry: dict[str, float] = field(default_factory=lambda: NO_TELEMETRY.copy())  # the TELEMETRY_COLUMNS


def records_from_steps(
    steps: list[Step], optimal_value: float, reference_value: float, dim_x: int, dim_c: int
) -> pd.DataFrame:
    """The records of a run: one row per step, CORE_COLUMNS then x_* and c_*.

    Regret is against both the exact optimum and the published constant; the running sums
    add in step order (float64, as a running total would), so records do not depend on how
    they are computed.
    """
    regret = [optimal_value - s.expected_value for s in steps]
    regret_reference = [reference_value - s.expected_value for s in steps]
    rows = {
        "step": list(range(1, len(steps) + 1)),
        "is_initial": [s.is_initial for s in steps],
        "n_observations": [s.n_observations for s in steps],
        "y": [s.y for s in steps],
        "expected_value": [s.expected_value for s in steps],
        "regret": regret,
        "regret_reference": regret_reference,
        "cumulative_regret": list(accumulate(regret)),
        "cumulative_regret_reference": list(accumulate(regret_reference)),
        "best_y": list(accumulate((s.y for s in steps), max)),
        "radius": [s.radius for s in steps],
        **{column: [s.timings[column] for s in steps] for column in TIME_COLUMNS},
        **{column: [s.telemetry[column] for s in steps] for column in TELEMETRY_COLUMNS},
        **{name: [s.x[i] for s in steps] for i, name in enumerate(x_columns(dim_x))},
        **{name: [s.context[i] for s in steps] for i, name in enumerate(c_columns(dim_c))},
    }
    return pd.DataFrame(rows)[list(CORE_COLUMNS) + x_columns(dim_x) + c_columns(dim_c)]


def deterministic_part(records: pd.DataFrame) -> pd.DataFrame:
    """The records without MACHINE_COLUMNS: what the same spec must reproduce exactly."""
    return records[[column for column in records.columns if column not in MACHINE_COLUMNS]]
