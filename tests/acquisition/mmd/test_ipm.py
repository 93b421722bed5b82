"""The compiled interior-point method of the working set's restricted programs (mmd/ipm.py):
an optimal primal-dual pair of min c^T x, A x = b, x >= 0, h - G x in SOC, as Clarabel finds it."""

from __future__ import annotations

import numpy as np
import pytest

from wdrbo_dist.acquisition.mmd.ipm import SOLVED, solve_restricted

TOLERANCE = 1e-8


def _restricted_program(rng: np.random.Generator, k: int, rows: int, radius: float):
    """A program of the working set's shape: k grid points and the aggregate along the centre w,
    sum = 1, and ||F^T (x - w)|| <= radius written as the cone (radius, F^T w - F^T x)."""
    grid = np.sort(rng.uniform(0, 1, k))
    w_grid = rng.uniform(0, 1)
    points = np.r_[grid, w_grid]
    gram = np.exp(-0.5 * (points[:, None] - points[None, :]) ** 2 / 0.2**2)
    eigenvalues, vectors = np.linalg.eigh(gram)
    keep = eigenvalues > 1e-12 * eigenvalues.max()
    factor = vectors[:, keep] * np.sqrt(eigenvalues[keep])  # F F^T = gram, one row per point
    factor = factor[:, -rows:]
    centre = np.zeros(k + 1)
    centre[-1] = 1.0  # the aggregate variable is the centre itself
    g = np.vstack([np.zeros(k + 1), factor.T])
    h = np.r_[radius, factor.T @ centre]
    c = rng.normal(size=k + 1)
    return c, np.ones((1, k + 1)), np.ones(1), g, h


def _clarabel(c, a, b, g, h):
    import clarabel
    import scipy.sparse as sp

    n = c.shape[0]
    matrix = sp.csc_matrix(np.vstack([a, -np.eye(n), g]))
    settings = clarabel.DefaultSettings()
    settings.verbose = False
    cones = [clarabel.ZeroConeT(a.shape[0]), clarabel.NonnegativeConeT(n), clarabel.SecondOrderConeT(g.shape[0])]
    solver = clarabel.DefaultSolver(sp.csc_matrix((n, n)), c, matrix, np.r_[b, np.zeros(n), h], cones, settings)
    result = solver.solve()
    assert str(result.status) == "Solved"
    return np.array(result.x), float(result.obj_val)


@pytest.mark.parametrize("k", [1, 3, 8, 20])
@pytest.mark.parametrize("radius", [1e-3, 0.1, 0.6, 5.0])
def test_optimum_and_certificate_match_clarabel(k: int, radius: float) -> None:
    rng = np.random.default_rng(100 * k + int(1000 * radius))
    for trial in range(5):
        c, a, b, g, h = _restricted_program(rng, k, rows=min(k + 1, 6), radius=radius)
        status, x, y, z, iterations = solve_restricted(c, a, b, g, h)
        assert status == SOLVED and iterations < 40
        _, value = _clarabel(c, a, b, g, h)
        assert float(c @ x) == pytest.approx(value, abs=1e-7 * max(1.0, abs(value)))
        # primal feasibility
        assert np.abs(a @ x - b).max() <= TOLERANCE and x.min() >= -TOLERANCE
        slack = h - g @ x
        assert slack[0] >= np.linalg.norm(slack[1:]) - TOLERANCE
        # dual feasibility: the bound multipliers (reduced costs) >= 0, z in the cone; no gap
        reduced = c + a.T @ y + g.T @ z
        assert reduced.min() >= -TOLERANCE and z[0] >= np.linalg.norm(z[1:]) - TOLERANCE
        assert float(c @ x) == pytest.approx(-float(b @ y) - float(h @ z), abs=1e-7)


def test_a_point_mass_ball_and_ties() -> None:
    """Radius ~0 pins x to the centre (the aggregate); equal costs leave any split optimal."""
    rng = np.random.default_rng(4)
    c, a, b, g, h = _restricted_program(rng, 4, rows=5, radius=1e-12)
    status, x, _, _, _ = solve_restricted(c, a, b, g, h)
    assert status == SOLVED and x[-1] == pytest.approx(1.0, abs=1e-5)
    c = np.ones(5)
    status, x, _, _, _ = solve_restricted(c, a, b, *_restricted_program(rng, 4, rows=5, radius=0.5)[3:])
    assert status == SOLVED and float(c @ x) == pytest.approx(1.0, abs=1e-8)


def test_no_answer_is_reported_as_such() -> None:
    """An infeasible program (the sum row asks for -1 of nonnegative variables) is not SOLVED,
    so the working set hands the candidate to Clarabel's complete program."""
    rng = np.random.default_rng(8)
    c, a, _, g, h = _restricted_program(rng, 3, rows=4, radius=0.3)
    status, *_ = solve_restricted(c, a, -np.ones(1), g, h)
    assert status != SOLVED
