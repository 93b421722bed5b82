"""DRBO-MMD's certified working-set solve: the optimum of the complete compiled program, from
small restricted conic programs, or no answer at all (the caller then solves the complete one)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.support.routes import PAIRS, with_routes
from wdrbo_dist.acquisition.mmd import working_set as mmd_working_set
from wdrbo_dist.acquisition.base import BOState
from wdrbo_dist.acquisition.drbo_mmd import DRBOMMD, MMDWorstCase, gram_factor, tensor_grid_factor
from wdrbo_dist.acquisition.mmd.grid import mmd_radius
from wdrbo_dist.acquisition.mmd.working_set import SimplexConeProgram, WorkingSetSolver
from wdrbo_dist.models.fit import fit_gp
from wdrbo_dist.problems import make_problem
from wdrbo_dist.models.settings import NumericalSettings

T = torch.float64


def _rbf_gram(grid: np.ndarray, lengthscales: np.ndarray | float) -> np.ndarray:
    d2 = (((grid[:, None, :] - grid[None, :, :]) / lengthscales) ** 2).sum(-1)
    return np.exp(-0.5 * d2)


def _smooth_rows(rng: np.random.Generator, grid: np.ndarray, count: int) -> np.ndarray:
    """UCB-like rows on the grid: a few random cosines, some with a little noise."""
    rows = []
    for i in range(count):
        freq = rng.normal(scale=6.0, size=(4, grid.shape[1]))
        phase = rng.uniform(0, 2 * np.pi, 4)
        row = np.cos(grid @ freq.T + phase) @ rng.normal(size=4)
        rows.append(row + (0.05 * rng.normal(size=grid.shape[0]) if i % 3 == 0 else 0.0))
    return np.array(rows)


def _instances():
    """(factor, w, radius, grid) on a 100-point 1-D grid and a 10 x 10 tensor grid, n = 5..100."""
    rng = np.random.default_rng(11)
    line = np.linspace(0, 1, 100)[:, None]
    axis = np.linspace(0, 1, 10)
    square = np.array([[a, b] for a in axis for b in axis])
    for n in (5, 12, 30, 60, 100):
        for lengthscale in (0.05, 0.2, 0.8):
            w = np.bincount(rng.integers(0, 100, n), minlength=100) / n
            yield gram_factor(_rbf_gram(line, lengthscale)), w, mmd_radius(n), line
        scales = rng.uniform(0.1, 0.6, 2)
        w = np.bincount(rng.integers(0, 100, n), minlength=100) / n
        yield tensor_grid_factor([axis, axis], scales), w, mmd_radius(n), square


def test_working_set_gives_the_optimum_of_the_complete_program() -> None:
    rng = np.random.default_rng(5)
    restricted = complete_fallbacks = 0
    for factor, w, radius, grid in _instances():
        fast = MMDWorstCase(100, solver="CLARABEL", equilibrate=False, working_set=True)
        full = MMDWorstCase(100, solver="CLARABEL", equilibrate=False, working_set=False)
        fast.prepare(factor, w, radius)
        full.prepare(factor, w, radius)
        base = _smooth_rows(rng, grid, 6)
        for row, u0 in enumerate(base):
            for step in range(4):  # a restart's Adam steps: u moves a little each time
                u = u0 + 0.02 * step * np.sin(3 * grid[:, 0] + row)
                p, status = fast.solve(u, slot=(6, row))
                q, _ = full.solve(u)
                assert status == "optimal"
                assert float(u @ p) == pytest.approx(float(u @ q), abs=1e-6 * max(1.0, np.abs(u).max()))
                assert p.sum() == pytest.approx(1.0, abs=1e-8) and p.min() > -1e-7  # interior-point accuracy
                assert np.linalg.norm(factor.T @ (p - w)) <= radius * (1 + 1e-7)
        restricted += fast._working.programs
        complete_fallbacks += fast.complete_programs
    assert restricted > 0
    assert complete_fallbacks <= 0.05 * 16 * 24  # the complete program is the exception


def test_every_answer_carries_the_certificate_of_its_optimality() -> None:
    """Each certified answer x comes with the dual (z_eq, z_cone) it was certified by, checked
    here in NumPy against the complete program: x is feasible, z_cone lies in the second-order
    cone, every reduced cost c_j + a_j^T z is at least -tol (the bound rows' multipliers), and
    the dual objective -b^T z is c^T x, so weak duality makes x optimal to the tolerance."""
    rng = np.random.default_rng(8)
    checked = 0
    for factor, w, radius, grid in _instances():
        program = MMDWorstCase(100, solver="CLARABEL", equilibrate=False, working_set=True)
        program.prepare(factor, w, radius)
        solver = program._working
        data, index = solver._program, program.cvx["embedding"]
        zero = data.a_eq.shape[0]
        for row, u0 in enumerate(_smooth_rows(rng, grid, 4)):
            for step in range(3):
                c = np.zeros(program.cvx["n_var"])
                c[index] = u0 + 0.02 * step * np.sin(3 * grid[:, 0] + row)
                x = solver.solve(c, row)
                if x is None:
                    continue
                scale = max(1.0, float(np.abs(c).max()))
                z_eq, z_cone = solver._memory.dual[row][:zero], solver._memory.dual[row][zero:]
                slack = data.b_cone - data.a_cone @ x
                assert np.allclose(data.a_eq @ x, data.b_eq, rtol=0, atol=1e-8) and x.min() >= -1e-8
                assert slack[0] >= np.linalg.norm(slack[1:]) - 1e-8
                assert z_cone[0] >= np.linalg.norm(z_cone[1:]) - 1e-8 * scale
                reduced = c + data.a_eq.T @ z_eq + data.a_cone.T @ z_cone
                assert reduced.min() >= -solver.tolerance * scale
                dual_objective = -(data.b_eq @ z_eq + data.b_cone @ z_cone)
                assert float(c @ x) == pytest.approx(float(dual_objective), abs=1e-7 * scale)
                checked += 1
    assert checked > 200


def _program_and_objective(seed: int = 3):
    rng = np.random.default_rng(seed)
    grid = np.linspace(0, 1, 100)[:, None]
    w = np.bincount(rng.integers(0, 100, 40), minlength=100) / 40
    full = MMDWorstCase(100, solver="CLARABEL", equilibrate=False)
    full.prepare(gram_factor(_rbf_gram(grid, 0.1)), w, mmd_radius(40))
    return full, w, _smooth_rows(rng, grid, 1)[0]


def _compiled(full: MMDWorstCase, w: np.ndarray) -> SimplexConeProgram:
    import cvxpy as cp

    from wdrbo_dist.acquisition.drbo_mmd import drop_zero_cone_rows

    data, _, _ = full.cvx["problem"].get_problem_data(cp.CLARABEL)
    a = data["A"].tocsc()
    a.eliminate_zeros()
    a, b, dims = drop_zero_cone_rows(a, np.asarray(data["b"], dtype=float), data["dims"])
    centre = np.zeros(full.cvx["n_var"])
    centre[full.cvx["embedding"]] = w
    program = SimplexConeProgram.from_compiled(a, b, dims, centre)
    assert program is not None
    return program


def test_a_wrong_guess_is_corrected_or_refused_never_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    full, w, u = _program_and_objective()
    expected, _ = full.solve(u)
    index = full.cvx["embedding"]
    c = np.zeros(full.cvx["n_var"])
    c[index] = u
    solver = WorkingSetSolver()
    solver.prepare(_compiled(full, w))
    worst_guess = np.argsort(c)[-3:]  # the three largest costs: no mass belongs there
    solver._memory.support["slot"] = worst_guess
    x = solver.solve(c, "slot")
    assert x is not None and float(c @ x) == pytest.approx(float(u @ expected), abs=1e-7)
    assert solver.programs >= 2  # the certificate failed first, then the set grew

    monkeypatch.setattr(mmd_working_set, "MAX_ROUNDS", 1)
    monkeypatch.setattr(mmd_working_set, "ADDED_PER_ROUND", 0)
    solver.prepare(_compiled(full, w))
    solver._memory.support["slot"] = worst_guess
    c_far = c.copy()
    c_far[worst_guess] -= 10.0  # make the guess optimal-looking for the objective but not the ball
    x_far = solver.solve(c_far, "slot")
    complete = full.solve(c_far[index])[0]
    assert x_far is None or float(c_far @ x_far) == pytest.approx(float(c_far[index] @ complete), abs=1e-7)

    solver.prepare(_compiled(full, w))
    solver._memory.support["slot"] = worst_guess
    assert solver.solve(c, "slot") is None  # one round, a wrong set: refused, not returned


def test_other_program_layouts_are_not_handled() -> None:
    a = np.array([[1.0, 1.0], [-1.0, 0.0], [0.0, -1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    b = np.array([1.0, 0.0, 0.0, 0.5, 0.2, 0.3])
    centre = np.array([0.5, 0.5])
    ok = SimplexConeProgram.from_compiled(a, b, SimpleNamespace(zero=1, nonneg=2, soc=[3]), centre)
    assert ok is not None and ok.a_cone.shape == (3, 2)
    two_cones = SimpleNamespace(zero=1, nonneg=2, soc=[2, 1])
    assert SimplexConeProgram.from_compiled(a, b, two_cones, centre) is None
    scaled = a.copy()
    scaled[1, 0] = -2.0  # a bound row that is not -x_j
    assert SimplexConeProgram.from_compiled(scaled, b, SimpleNamespace(zero=1, nonneg=2, soc=[3]), centre) is None


@pytest.mark.parametrize("radius", [0.05, 0.3, 2.0])
def test_ties_point_mass_centres_and_large_balls(radius: float) -> None:
    grid = np.linspace(0, 1, 30)[:, None]
    factor = gram_factor(_rbf_gram(grid, 0.2))
    w = np.zeros(30)
    w[4] = 1.0
    program = MMDWorstCase(30, solver="CLARABEL", equilibrate=False, working_set=True)
    program.prepare(factor, w, radius)
    for u in (np.full(30, 0.7), np.r_[np.zeros(15), np.ones(15)], np.cos(np.linspace(0, 6, 30))):
        p, status = program.solve(u)
        reference = MMDWorstCase(30, solver="CLARABEL", equilibrate=False)
        reference.prepare(factor, w, radius)
        q, _ = reference.solve(u)
        assert status == "optimal" and np.isfinite(p).all()
        assert float(u @ p) == pytest.approx(float(u @ q), abs=1e-6)


def test_the_routes_are_settings_and_the_solver_an_option() -> None:
    problem = make_problem("ackley")
    paper = reference = NumericalSettings.for_run("cpu")  # the routes are the device's, not the profile's
    for fidelity, settings in (("paper", paper), ("reference", reference)):  # a fast path, not a fidelity change
        algorithm = DRBOMMD(problem, fidelity)
        assert algorithm.options["mmd_solver"] == "CLARABEL"
        program = algorithm.program(settings)
        assert (program.working_set, program.equilibrate) == (True, False)
    for removed in ("mmd_working_set", "mmd_equilibrate", "mmd_solve_path", "mmd_restricted_solver", "mmd_warm_start"):
        with pytest.raises(ValueError, match=f"unknown option '{removed}'"):
            DRBOMMD(problem, "paper", {removed: True})
    # The working set gives way to a solver or path it cannot use; equilibration left unset
    # follows the solver.
    scs = DRBOMMD(problem, "reference", {"mmd_solver": "SCS"}).program(reference)
    assert scs.working_set is False and scs.equilibrate is True
    assert DRBOMMD(problem, "paper").program(replace(paper, mmd_solve_path="cvxpy")).working_set is False
    explicit = DRBOMMD(problem, "paper", {"mmd_solver": "SCS"}).program(replace(paper, mmd_equilibrate=False))
    assert explicit.equilibrate is False


def test_acquisition_counts_programs_and_most_candidates_need_one() -> None:
    problem = make_problem("ackley")
    g = torch.Generator().manual_seed(0)
    x = torch.rand(25, problem.dim_x, generator=g, dtype=T)
    obs = problem.observe(x, g)
    model, _ = fit_gp(torch.cat([x, obs.context], -1), obs.y, g, PAIRS)
    state = BOState(x, obs.context, obs.y)
    fast = DRBOMMD(problem, "paper").acquisition(model, state, torch.Generator())
    full = DRBOMMD(problem, "paper").acquisition(with_routes(model, mmd_working_set=False), state, torch.Generator())
    candidates = torch.rand(40, 2, generator=torch.Generator().manual_seed(1), dtype=T)
    with torch.no_grad():
        a, b = fast(candidates), full(candidates)
    assert torch.allclose(a, b, atol=1e-6)
    assert full.telemetry.programs == full.telemetry.solves == 40
    assert fast.telemetry.solves == 40 and fast.telemetry.programs >= 40
    assert fast.program.complete_programs <= 4


def test_scheduling_cost_follows_the_solver_the_options_choose() -> None:
    from wdrbo_dist.run.spec import RunSpec
    from wdrbo_dist.driver.plan import expected_cost

    def cost(fidelity: str, **options: object) -> float:
        return expected_cost(RunSpec.make(algorithm="drbo-mmd", problem="ackley", seed=1, fidelity=fidelity, options=options))

    assert cost("paper") == cost("reference") < cost("reference", mmd_solver="SCS")  # SCS: no working set
