"""DRBO-MMD (method §3.6): the grid, the pmf, the PSD-safe factor and the conic solve against
independent computations on small grids; fallback, telemetry, pickling."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from tests.support.routes import PAIRS
from wdrbo_dist.acquisition.base import BOState
from wdrbo_dist.acquisition.drbo_mmd import DRBOMMD, MMDAcquisition, MMDWorstCase, drop_zero_cone_rows, gram_factor
from wdrbo_dist.acquisition.mmd.grid import MMD_RADIUS_CONSTANT, context_gram, context_grid, empirical_pmf, mmd_radius
from wdrbo_dist.models.fit import fit_gp
from wdrbo_dist.models.kernel import rbf
from wdrbo_dist.problems import make_problem

T = torch.float64
UNIT2 = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=T)


def _state_and_model(problem_name: str = "ackley", n: int = 12, seed: int = 0):
    problem = make_problem(problem_name)
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, problem.dim_x, generator=g, dtype=T)
    obs = problem.observe(x, g)
    model, _ = fit_gp(torch.cat([x, obs.context], -1), obs.y, g, PAIRS)
    return problem, BOState(x, obs.context, obs.y), model


def _rbf_gram(grid: np.ndarray, lengthscale: float) -> np.ndarray:
    d2 = ((grid[:, None, :] - grid[None, :, :]) ** 2).sum(-1)
    return np.exp(-0.5 * d2 / lengthscale**2)


# --- grid, pmf, radius, factor ------------------------------------------------------------------


def test_grids_reference_diagonal_and_paper_tensor() -> None:
    one = context_grid(torch.tensor([[0.0], [1.0]], dtype=T), 100, diagonal=True)
    assert one.shape == (100, 1) and float(one[0]) == 0.0 and float(one[-1]) == 1.0
    diag = context_grid(UNIT2, 100, diagonal=True)
    assert diag.shape == (10, 2) and torch.equal(diag[:, 0], diag[:, 1])
    full = context_grid(UNIT2, 100, diagonal=False)
    assert full.shape == (100, 2) and len(set(map(tuple, full.tolist()))) == 100
    assert context_grid(UNIT2, 1024, diagonal=False).shape == (1024, 2)
    assert context_grid(UNIT2, 1024, diagonal=True).shape == (32, 2)


def test_pmf_snaps_to_the_nearest_point_with_ties_to_the_first_index() -> None:
    grid = torch.tensor([[0.0], [0.5], [1.0]], dtype=T)
    contexts = torch.tensor([[0.25], [0.75], [0.9], [-0.3], [0.5]], dtype=T)  # two exact ties
    w = empirical_pmf(contexts, grid)
    assert torch.allclose(w, torch.tensor([2, 2, 1], dtype=T) / 5)


def test_radius() -> None:
    assert MMD_RADIUS_CONSTANT == pytest.approx(4.1460, abs=1e-4)
    assert mmd_radius(16) == pytest.approx(MMD_RADIUS_CONSTANT / 4)


@pytest.mark.parametrize("kind", ["pivoted", "eigen", "cholesky"])
def test_factor_reproduces_the_gram_matrix(kind: str) -> None:
    grid = np.linspace(0, 1, 100)[:, None]
    for lengthscale in (0.05, 0.3, 2.0):  # up to numerically indefinite
        k = _rbf_gram(grid, lengthscale)
        f = gram_factor(k, kind)
        assert np.abs(f @ f.T - k).max() < 1e-6


def test_pivoted_factor_has_a_staircase_pattern_and_matches_the_eigen_factor_values() -> None:
    grid = context_grid(UNIT2, 100, diagonal=False).numpy()
    d2 = ((grid[:, None, :] - grid[None, :, :]) ** 2 / np.array([0.2, 0.3]) ** 2).sum(-1)
    k = np.exp(-0.5 * d2)  # a full-rank, badly conditioned 10 x 10 grid Gram matrix
    factor = gram_factor(k, "pivoted")
    rank = int((factor != 0).any(0).sum())
    assert np.count_nonzero(factor) <= 100 * rank - rank * (rank - 1) // 2  # permuted triangular
    rng = np.random.default_rng(3)
    w = np.bincount(rng.integers(0, 100, 40), minlength=100) / 40.0
    rows = rng.normal(size=(3, 100))
    values = {}
    for kind in ("pivoted", "eigen"):
        program = MMDWorstCase(100, solver="CLARABEL")
        program.prepare(gram_factor(k, kind), w, 0.6)
        values[kind] = [float(u @ program.solve(u)[0]) for u in rows]
    assert np.allclose(values["pivoted"], values["eigen"], atol=1e-6)


# --- the conic solve against independent computations --------------------------------------------


def _slsqp(u: np.ndarray, w: np.ndarray, k: np.ndarray, r: float) -> float:
    """min u^T p on the simplex with (p - w)^T K (p - w) <= r^2, by SLSQP from several starts."""
    size = u.size
    cons = [
        {"type": "eq", "fun": lambda p: p.sum() - 1.0, "jac": lambda p: np.ones(size)},
        {"type": "ineq", "fun": lambda p: r**2 - (p - w) @ k @ (p - w), "jac": lambda p: -2 * k @ (p - w)},
    ]
    best = math.inf
    rng = np.random.default_rng(0)
    for start in [w] + [0.5 * w + 0.5 * rng.dirichlet(np.ones(size)) for _ in range(6)]:
        res = minimize(
            lambda p: u @ p, start, jac=lambda p: u, method="SLSQP", bounds=[(0, 1)] * size,
            constraints=cons, options={"ftol": 1e-12, "maxiter": 500},
        )
        feasible = abs(res.x.sum() - 1) < 1e-7 and (res.x - w) @ k @ (res.x - w) <= r**2 + 1e-7
        if feasible:
            best = min(best, float(u @ res.x))
    return best


def test_two_point_grid_has_the_exact_interval_solution() -> None:
    # p = (t, 1 - t): MMD^2 = (t - w1)^2 (K11 + K22 - 2 K12), so t ranges over an interval.
    k = _rbf_gram(np.array([[0.0], [1.0]]), 0.7)
    kappa = 2 - 2 * k[0, 1]
    program = MMDWorstCase(2)
    for w1, r, u in ((0.5, 0.2, (1.0, 3.0)), (0.3, 0.1, (2.0, -1.0)), (0.9, 2.0, (0.0, 1.0))):
        w = np.array([w1, 1 - w1])
        program.prepare(gram_factor(k), w, r)
        p, status = program.solve(np.array(u))
        assert status == "optimal"
        half = r / math.sqrt(kappa)
        ts = np.clip([w1 - half, w1 + half], 0, 1)
        exact = min(u[0] * t + u[1] * (1 - t) for t in ts)
        assert float(np.array(u) @ p) == pytest.approx(exact, abs=1e-4)


@pytest.mark.parametrize(("solver", "path", "kind"), [
    ("SCS", "compiled", "pivoted"),
    ("CLARABEL", "compiled", "pivoted"),
    ("SCS", "compiled", "eigen"),
    ("SCS", "cvxpy", "eigen"),
    ("SCS", "compiled", "cholesky"),
    ("CLARABEL", "compiled", "eigen"),
    ("CLARABEL", "cvxpy", "cholesky"),
])
def test_solve_matches_slsqp_on_small_grids(solver: str, path: str, kind: str) -> None:
    rng = np.random.default_rng(1)
    for size, lengthscale in ((4, 0.4), (6, 0.25), (8, 0.6)):
        grid = np.linspace(0, 1, size)[:, None]
        k = _rbf_gram(grid, lengthscale)
        program = MMDWorstCase(size, solver=solver, path=path)
        for trial in range(4):
            w = np.bincount(rng.integers(0, size, 7), minlength=size) / 7.0
            r = float(rng.uniform(0.05, 0.8))
            program.prepare(gram_factor(k, kind), w, r)
            for slot in range(3):  # warm starts from the previous solution of the slot
                u = rng.normal(size=size)
                p, status = program.solve(u, slot=slot)
                assert status == "optimal" and p is not None
                assert p.sum() == pytest.approx(1.0, abs=1e-4) and p.min() > -1e-4
                assert (p - w) @ k @ (p - w) <= r**2 + 1e-4
                assert float(u @ p) == pytest.approx(_slsqp(u, w, k, r), abs=2e-4)


def test_zero_cone_rows_are_dropped_and_the_rest_kept() -> None:
    import scipy.sparse as sp
    from types import SimpleNamespace

    # rows: 1 zero-cone, 2 nonneg, then SOC of 4 rows (one identically zero), SOC of 3 (b != 0)
    a = sp.csc_matrix(np.array([
        [1.0, 1.0], [-1.0, 0.0], [0.0, -1.0],
        [0.0, 0.0], [2.0, 0.0], [0.0, 0.0], [0.0, 3.0],
        [0.0, 0.0], [0.0, 0.0], [1.0, 0.0],
    ]))
    b = np.array([1.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.7, 0.2, 0.0])
    dims = SimpleNamespace(zero=1, nonneg=2, soc=[4, 3])
    a2, b2, kept = drop_zero_cone_rows(a, b, dims)
    assert (kept.zero, kept.nonneg, kept.soc) == (1, 2, (3, 3))  # the SOC's leading row always stays
    assert np.array_equal(b2, b[[0, 1, 2, 3, 4, 6, 7, 8, 9]])
    assert np.array_equal(a2.toarray(), a.toarray()[[0, 1, 2, 3, 4, 6, 7, 8, 9]])


@pytest.mark.parametrize("solver", ["CLARABEL", "SCS"])
def test_low_rank_factor_solves_agree_with_and_without_equilibration(solver: str) -> None:
    # A smooth 1-D Gram matrix: rank ~ 20 of 100, so most of the cone's rows are dropped.
    grid = np.linspace(0, 1, 100)[:, None]
    factor = gram_factor(_rbf_gram(grid, 0.15))
    assert (np.abs(factor).sum(0) > 0).sum() < 40
    rng = np.random.default_rng(4)
    w = np.bincount(rng.integers(0, 100, 30), minlength=100) / 30.0
    values = {}
    ucb_rows = rng.normal(size=(5, 100)) + np.linspace(0, 1, 100)
    for equilibrate in (True, False):
        program = MMDWorstCase(100, solver=solver, equilibrate=equilibrate)
        program.prepare(factor, w, mmd_radius(30))
        rows = [program.solve(u) for u in ucb_rows]
        assert all(status == "optimal" for _, status in rows)
        values[equilibrate] = [p for p, _ in rows]
    tolerance = 1e-6 if solver == "CLARABEL" else 1e-3
    for u, p_on, p_off in zip(ucb_rows, values[True], values[False]):
        assert float(u @ p_on) == pytest.approx(float(u @ p_off), abs=tolerance)
        assert np.linalg.norm(factor.T @ (p_off - w)) <= mmd_radius(30) + tolerance


def test_identical_rows_in_a_step_are_solved_once() -> None:
    problem, state, model = _state_and_model("ackley", n=10)
    acq = DRBOMMD(problem, "paper").acquisition(model, state, torch.Generator())
    x = torch.tensor([[0.3, 0.2], [0.0, 1.0], [0.3, 0.2], [0.0, 1.0], [0.7, 0.1]], dtype=T)  # a restart pinned to a bound
    with torch.no_grad():
        values = acq(x)
    assert acq.telemetry.solves == 3  # distinct rows only
    assert values[0] == values[2] and values[1] == values[3]
    with torch.no_grad():
        again = acq(x)  # a later call of the same step (the final evaluation, say)
    assert acq.telemetry.solves == 3 and torch.equal(again, values)


def test_large_radius_gives_the_worst_grid_point() -> None:
    # r >= sqrt(2) >= every MMD on the grid (method §3.6, n <= 8): p* is the point mass at argmin u.
    grid = np.linspace(0, 1, 100)[:, None]
    program = MMDWorstCase(100)
    w = np.zeros(100)
    w[[10, 50, 51]] = [0.2, 0.4, 0.4]
    program.prepare(gram_factor(_rbf_gram(grid, 0.1)), w, mmd_radius(5))
    u = np.cos(np.linspace(0, 3, 100))
    p, status = program.solve(u)
    assert status == "optimal"
    assert float(u @ p) == pytest.approx(u.min(), abs=1e-4)


# --- the acquisition -------------------------------------------------------------------------------


def test_acquisition_value_gradient_and_telemetry() -> None:
    problem, state, model = _state_and_model("ackley", n=20)
    algo = DRBOMMD(problem, "paper")
    acq = algo.acquisition(model, state, torch.Generator())
    assert acq.radius == pytest.approx(MMD_RADIUS_CONSTANT / math.sqrt(20))
    x = torch.rand(6, 2, generator=torch.Generator().manual_seed(2), dtype=T).requires_grad_(True)
    value = acq(x)
    assert acq.telemetry.solves == 6 and acq.telemetry.failures == 0 and acq.telemetry.fallbacks == 0
    assert acq.telemetry.seconds > 0
    grid = algo.grid()
    u = model.ucb_pairs(x, grid, 1.5)[0]
    w = empirical_pmf(state.context, grid)
    p = torch.as_tensor(acq.worst_case(u.detach().numpy()))
    assert torch.allclose(value, (p * u).sum(-1), atol=1e-4)
    assert torch.all(value <= u.detach() @ w + 1e-4)  # the worst case is below the centre's mean
    assert torch.all(value >= u.detach().min(-1).values - 1e-4)
    (grad,) = torch.autograd.grad(value.sum(), x)  # envelope gradient: p* frozen
    (expected,) = torch.autograd.grad((p * u).sum(), x)
    assert torch.allclose(grad, expected, atol=1e-3)


def test_failed_solve_falls_back_to_the_centre_and_is_counted() -> None:
    problem, state, model = _state_and_model("ackley", n=10)
    grid = context_grid(problem.context_bounds, 20, diagonal=True)
    program = MMDWorstCase(20)
    gram = np.exp(-0.5 * (grid.numpy() - grid.numpy().T) ** 2 / 0.2**2)
    w = np.zeros(20)  # not a pmf: ||F^T p|| <= 1e-3 with sum p = 1 is infeasible, a real failed solve
    program.prepare(gram_factor(gram), w, 1e-3)
    acq = MMDAcquisition(model, 1.5, grid, torch.as_tensor(w), program, 1e-3)
    x = torch.rand(3, 2, generator=torch.Generator().manual_seed(0), dtype=T)
    with torch.no_grad():
        value = acq(x)
    assert torch.equal(value, torch.zeros(3, dtype=T))  # p = w
    tel = acq.telemetry
    assert (tel.solves, tel.failures, tel.fallbacks) == (3, 3, 3)
    rows = acq.worst_case(np.array([[np.nan] + [0.0] * 19]))  # a non-finite UCB row: no solve
    assert np.array_equal(rows[0], w) and tel.fallbacks == 4


def test_algorithm_pickles_before_and_after_use_and_rebuilds_its_problem() -> None:
    problem, state, model = _state_and_model("modified-branin", n=8)
    algo = DRBOMMD(problem, "reference")
    algo = pickle.loads(pickle.dumps(algo))
    assert algo.grid().shape == (10, 2)  # reference: the diagonal
    acq = algo.acquisition(model, state, torch.Generator())
    x = torch.rand(2, 2, generator=torch.Generator().manual_seed(0), dtype=T)
    with torch.no_grad():
        before = acq(x)
    clone = pickle.loads(pickle.dumps(algo))
    assert clone.program(model.settings)._cvx is None  # CVXPY objects are rebuilt in the process that uses them
    with torch.no_grad():
        after = clone.acquisition(model, state, torch.Generator())(x)
    assert torch.allclose(before, after, atol=1e-4)
    assert DRBOMMD(problem, "paper").grid().shape == (100, 2)


def test_bad_choice_options_are_rejected_up_front() -> None:
    problem = make_problem("ackley")
    with pytest.raises(ValueError, match="mmd_solver"):
        DRBOMMD(problem, "paper", {"mmd_solver": "GUROBI"})
    with pytest.raises(ValueError, match="unknown option 'mmd_factor'"):  # a route: NumericalSettings.mmd_factor
        DRBOMMD(problem, "paper", {"mmd_factor": "svd"})
    assert DRBOMMD(problem, "paper", {"mmd_solver": "clarabel"}).options["mmd_solver"] == "CLARABEL"


@pytest.mark.parametrize("solver", ["SCS", "CLARABEL"])
def test_equal_ucb_values_and_a_point_mass_centre_give_finite_values(solver: str) -> None:
    grid = np.linspace(0, 1, 30)[:, None]
    program = MMDWorstCase(30, solver=solver)
    w = np.zeros(30)
    w[4] = 1.0  # every observed context on one grid point
    program.prepare(gram_factor(_rbf_gram(grid, 0.2)), w, 0.3)
    p, status = program.solve(np.full(30, 0.7))
    assert status == "optimal" and np.isfinite(p).all()
    assert float(np.full(30, 0.7) @ p) == pytest.approx(0.7, abs=1e-4)


def test_tensor_grid_factor_is_a_factor_of_the_grid_gram_matrix() -> None:
    problem, state, model = _state_and_model("modified-branin", n=15)
    algo = DRBOMMD(problem, "paper")
    grid = algo.grid()
    lengthscale = model.lengthscale[2:]
    gram = context_gram(grid, lengthscale)
    factor = algo.factor(gram, lengthscale)
    assert factor.shape == (100, 100)
    assert np.abs(factor @ factor.T - gram.numpy()).max() < 1e-8
    reference = DRBOMMD(problem, "reference")  # the diagonal: a factor of its own K
    diag_gram = context_gram(reference.grid(), lengthscale)
    assert np.abs(reference.factor(diag_gram, lengthscale) @ reference.factor(diag_gram, lengthscale).T - diag_gram.numpy()).max() < 1e-8


@pytest.mark.parametrize(("points", "dim"), [(1024, 1), (1000, 1), (1024, 2), (33, 3), (1, 1)])
def test_the_grid_gram_matrix_is_torchs_symmetric_part_to_the_bit(points: int, dim: int) -> None:
    generator = torch.Generator().manual_seed(points)
    grid = torch.rand(points, dim, generator=generator, dtype=torch.float64) * 4 - 2
    lengthscale = torch.rand(dim, generator=generator, dtype=torch.float64) + 0.05
    k = rbf(grid, grid, lengthscale)
    gram = context_gram(grid, lengthscale)
    assert torch.equal(gram, 0.5 * (k + k.T)) and torch.equal(gram, gram.T)
