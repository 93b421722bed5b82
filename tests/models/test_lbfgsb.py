"""The GP fit's L-BFGS-B loop is scipy.optimize.minimize(method="L-BFGS-B") to the bit: the
same point, value, status and counts on the fit's own objective from the starts a fit takes
(the prior modes, draws of the priors), and where the objective fails part of the way."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize

from wdrbo_dist.models.compiled_fit import CompiledMapObjective
from wdrbo_dist.models.lbfgsb import minimize_lbfgsb
from wdrbo_dist.models.map_objective import FAILED_OBJECTIVE, LENGTHSCALE_MIN, NOISE_MIN, lengthscale_prior


def _scipy(objective, start: np.ndarray, lower: np.ndarray, upper: np.ndarray):  # type: ignore[no-untyped-def]
    bounds = [(None if np.isinf(lo) else lo, None if np.isinf(hi) else hi) for lo, hi in zip(lower, upper)]
    return minimize(objective, start, jac=True, method="L-BFGS-B", bounds=bounds)


def _assert_identical(objective, start: np.ndarray, lower: np.ndarray, upper: np.ndarray) -> None:  # type: ignore[no-untyped-def]
    ours = minimize_lbfgsb(objective, start, lower, upper)
    theirs = _scipy(objective, start, lower, upper)
    assert np.array_equal(ours.x, theirs.x)
    assert ours.fun == theirs.fun
    assert (ours.status, ours.success, ours.nfev, ours.nit) == (theirs.status, theirs.success, theirs.nfev, theirs.nit)


@pytest.mark.parametrize("seed", range(6))
def test_a_fit_takes_scipys_steps(seed: int) -> None:
    generator = np.random.default_rng(seed)
    n, dim = [(4, 2), (12, 3), (30, 3), (60, 4), (8, 1), (99, 3)][seed]
    x = generator.random((n, dim))
    y = np.sin(6 * x).sum(-1) + 0.1 * generator.standard_normal(n)
    y = (y - y.mean()) / y.std(ddof=1)
    loc, scale = lengthscale_prior(dim)
    objective = CompiledMapObjective(x, y, (loc, scale))
    lower = np.array([LENGTHSCALE_MIN] * dim + [NOISE_MIN, -np.inf])
    upper = np.full(dim + 2, np.inf)
    prior_modes = np.array([np.exp(loc - scale**2)] * dim + [np.exp(-4.0 - 1.0), 0.0])
    drawn = np.concatenate([np.exp(loc + scale * generator.standard_normal(dim)), [1e-2], [0.0]])
    outside = prior_modes.copy()
    outside[0] = LENGTHSCALE_MIN / 2  # clipped into the box first, as minimize does
    for start in (prior_modes, drawn, outside):
        _assert_identical(objective, start, lower, upper)


def test_an_objective_that_fails_in_places_takes_scipys_steps() -> None:
    def objective(theta: np.ndarray) -> tuple[float, np.ndarray]:
        if theta[0] > 2.0:  # as the MAP objective where K is not positive definite
            return FAILED_OBJECTIVE, np.zeros_like(theta)
        return float(((theta - 3.0) ** 2).sum()), 2 * (theta - 3.0)

    _assert_identical(objective, np.array([0.5, 0.5]), np.array([0.0, -np.inf]), np.array([np.inf, 10.0]))


def test_an_iteration_limit_is_status_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from wdrbo_dist.models import lbfgsb

    def rosenbrock(theta: np.ndarray) -> tuple[float, np.ndarray]:
        a, b = theta
        return float((1 - a) ** 2 + 100 * (b - a * a) ** 2), np.array([-2 * (1 - a) - 400 * a * (b - a * a),
                                                                      200 * (b - a * a)])

    monkeypatch.setattr(lbfgsb, "MAX_ITERATIONS", 3)
    result = lbfgsb.minimize_lbfgsb(rosenbrock, np.array([-1.2, 1.0]), np.full(2, -np.inf), np.full(2, np.inf))
    theirs = minimize(rosenbrock, np.array([-1.2, 1.0]), jac=True, method="L-BFGS-B", options={"maxiter": 3})
    assert (result.status, result.nit) == (theirs.status, theirs.nit) == (1, 3)
    assert np.array_equal(result.x, theirs.x) and not result.success
