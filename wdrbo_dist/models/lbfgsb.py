"""L-BFGS-B for the GP fit: SciPy's routine (`_lbfgsb.setulb`) in a lean loop.

`scipy.optimize.minimize(fun, x0, jac=True, method="L-BFGS-B", bounds=...)` wraps every
evaluation in three memoising layers (MemoizeJac, ScalarFunction, a copying wrapper) and
builds a result object per iteration: ~80 us an evaluation here, as much as the compiled MAP
objective itself (~35 evaluations per fit). This loop calls the same routine with the same
settings (SciPy 1.17's defaults) and evaluates where it asks, once per new point, so its
iterates, values and stopping rule are SciPy's to the bit (`tests/models/test_lbfgsb.py`
checks them against `minimize` and fails if a SciPy upgrade changes the routine's interface).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import _lbfgsb  # the compiled routine behind minimize(method="L-BFGS-B")

# minimize's defaults for L-BFGS-B (scipy/optimize/_lbfgsb_py.py).
MEMORY = 10  # maxcor: variable-metric corrections kept
FTOL = 2.2204460492503131e-09
GTOL = 1e-5
MAX_EVALUATIONS = 15000
MAX_ITERATIONS = 15000
MAX_LINE_SEARCH = 20
# The routine's task codes (task[0]): evaluate f and g at x, a new iteration, converged.
_EVALUATE, _NEW_ITERATION, _CONVERGED, _STOP = 3, 1, 4, 5
_STOP_EVALUATIONS, _STOP_ITERATIONS = 502, 504


@dataclass(frozen=True)
class Minimum:
    """What `fit_gp` reads of scipy's OptimizeResult: status 0 converged, 1 stopped at an
    evaluation or iteration limit, 2 anything else (an abnormal line search)."""

    x: np.ndarray
    fun: float
    status: int
    nfev: int
    nit: int

    @property
    def success(self) -> bool:
        return self.status == 0


def minimize_lbfgsb(objective: Callable[[np.ndarray], tuple[float, np.ndarray]], x0: np.ndarray,
                    lower: np.ndarray, upper: np.ndarray) -> Minimum:
    """Minimise `objective` (theta -> (value, gradient)) from x0 within [lower, upper]
    (-inf / inf: unbounded on that side)."""
    n = x0.size
    x = np.clip(np.asarray(x0, dtype=np.float64).ravel(), lower, upper)
    has_lower, has_upper = np.isfinite(lower), np.isfinite(upper)
    # nbd: 0 unbounded, 1 lower only, 2 both, 3 upper only
    bound_kind = np.where(has_lower, np.where(has_upper, 2, 1), np.where(has_upper, 3, 0)).astype(np.int32)
    low = np.where(has_lower, lower, 0.0).astype(np.float64)
    high = np.where(has_upper, upper, 0.0).astype(np.float64)
    evaluated_x = x.copy()
    value, gradient = objective(x.copy())
    evaluations, iterations = 1, 0
    f = np.array(0.0)
    g = np.zeros(n)
    work = np.zeros(2 * MEMORY * n + 5 * n + 11 * MEMORY * MEMORY + 8 * MEMORY)
    integer_work = np.zeros(3 * n, dtype=np.int32)
    task = np.zeros(2, dtype=np.int32)
    line_search_task = np.zeros(2, dtype=np.int32)
    logical_save = np.zeros(4, dtype=np.int32)
    integer_save = np.zeros(44, dtype=np.int32)
    float_save = np.zeros(29)
    factr = FTOL / np.finfo(float).eps
    while True:
        g = g.astype(np.float64)
        _lbfgsb.setulb(MEMORY, x, low, high, bound_kind, f, g, factr, GTOL, work, integer_work, task,
                       logical_save, integer_save, float_save, MAX_LINE_SEARCH, line_search_task)
        if task[0] == _EVALUATE:
            if not np.array_equal(x, evaluated_x):
                evaluated_x = x.copy()
                value, gradient = objective(x.copy())
                evaluations += 1
            f, g = value, np.array(gradient, dtype=np.float64)
        elif task[0] == _NEW_ITERATION:
            iterations += 1
            if iterations >= MAX_ITERATIONS:
                task[0], task[1] = _STOP, _STOP_ITERATIONS
            elif evaluations > MAX_EVALUATIONS:
                task[0], task[1] = _STOP, _STOP_EVALUATIONS
        else:
            break
    if task[0] == _CONVERGED:
        status = 0
    elif evaluations > MAX_EVALUATIONS or iterations >= MAX_ITERATIONS:
        status = 1
    else:
        status = 2
    return Minimum(x=x, fun=float(f), status=status, nfev=evaluations, nit=iterations)
