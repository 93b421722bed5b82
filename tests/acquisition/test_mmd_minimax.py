"""The DRBO-MMD minimax approximation (method §3.7): each case on hand-made inputs, the reference's bug."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.support.routes import PAIRS
from wdrbo_dist.acquisition.base import BOState
from wdrbo_dist.acquisition.mmd.grid import MMD_RADIUS_CONSTANT, context_gram, context_grid, empirical_pmf
from wdrbo_dist.acquisition.mmd_minimax import (
    DRBOMMDMinimax,
    minimax_value,
    minimax_value_and_weights,
    point_mmd_squared,
)
from wdrbo_dist.models.fit import fit_gp
from wdrbo_dist.problems import make_problem

T = torch.float64


def _expected(u: np.ndarray, w: np.ndarray, k: np.ndarray, r: float, uniform: bool) -> float:
    """method §3.7 written out directly (e* as the quadratic form), the fixed case logic."""
    n = u.size
    j = int(np.argmin(u))
    g = u[j]
    mean = u.mean() if uniform else float(w @ u)
    delta = np.eye(n)[j] - w
    e_star = math.sqrt(delta @ k @ delta)
    tau = (g - mean) / e_star
    if r <= e_star:
        return (mean + r * tau + g) / 2
    return g


W = np.array([0.5, 0.5, 0.0])
K = np.array([[1.0, 0.3, 0.1], [0.3, 1.0, 0.3], [0.1, 0.3, 1.0]])
U_CASE2 = np.array([2.0, 3.0, 1.0])  # argmin at the grid point w does not cover: e* large
U_CASE3 = np.array([1.0, 3.0, 2.0])  # argmin inside w's support: e* small


def _e_star(u: np.ndarray) -> float:
    d = np.eye(3)[int(np.argmin(u))] - W
    return math.sqrt(d @ K @ d)


def _mmd_squared(w: np.ndarray) -> torch.Tensor:
    return point_mmd_squared(torch.tensor(K, dtype=T), torch.tensor(w, dtype=T))


def test_point_mmd_squared_is_the_quadratic_form_of_delta_minus_w() -> None:
    for j in range(3):
        d = np.eye(3)[j] - W
        assert float(_mmd_squared(W)[j]) == pytest.approx(d @ K @ d, abs=1e-15)


def _value(rows: list[np.ndarray], r: float, uniform: bool, bug: bool) -> torch.Tensor:
    u = torch.tensor(np.stack(rows), dtype=T)
    return minimax_value(u, torch.tensor(W, dtype=T), _mmd_squared(W), r, uniform, bug)


def test_hand_made_inputs_fall_in_the_intended_cases() -> None:
    r = 0.9
    assert _e_star(U_CASE2) > r > _e_star(U_CASE3)  # 1.118 > 0.9 > 0.59


@pytest.mark.parametrize("uniform", [True, False])
def test_case_2_value(uniform: bool) -> None:
    value = _value([U_CASE2], 0.9, uniform, bug=False)
    expected = _expected(U_CASE2, W, K, 0.9, uniform)
    assert float(value[0]) == pytest.approx(expected, abs=1e-12)
    # by hand: g = 1, e*^2 = (-0.5, -0.5, 1) K (-0.5, -0.5, 1)^T = 1.25, mean 2 (uniform) or 2.5 (w-weighted)
    mean = 2.0 if uniform else 2.5
    tau = (1.0 - mean) / math.sqrt(1.25)
    assert expected == pytest.approx((mean + 0.9 * tau + 1.0) / 2)


@pytest.mark.parametrize("uniform", [True, False])
def test_case_3_value_is_the_minimum(uniform: bool) -> None:
    value = _value([U_CASE3], 0.9, uniform, bug=False)
    assert float(value[0]) == 1.0


def test_case_1_never_triggers_for_a_positive_radius() -> None:
    rng = np.random.default_rng(0)
    u = torch.tensor(rng.normal(size=(50, 3)), dtype=T)
    fixed = minimax_value(u, torch.tensor(W, dtype=T), _mmd_squared(W), 1e-9, True, False)
    g = u.min(-1).values
    mean = u.mean(-1)
    assert torch.all(fixed >= g - 1e-12) and torch.all(fixed <= mean + 1e-12)


@pytest.mark.parametrize("radius", [1e-9, 0.5, 0.9, 3.0])
def test_values_without_a_graph_are_those_with_one_to_the_bit(radius: float) -> None:
    """Without autograd the spread S is skipped where no candidate can be in case 1: the same values."""
    rng = np.random.default_rng(4)
    rows = [rng.normal(size=(40, 3)), np.full((2, 3), 0.7), np.array([U_CASE2, U_CASE3])]
    for u_np in rows:
        for uniform in (True, False):
            for bug in (True, False):
                for w in (torch.tensor(W, dtype=T), torch.tensor([0.0, 1.0, 0.0], dtype=T)):
                    mmd = point_mmd_squared(torch.tensor(K, dtype=T), w)
                    with_graph = minimax_value(torch.tensor(u_np, dtype=T, requires_grad=True), w, mmd, radius, uniform, bug)
                    with torch.no_grad():
                        without = minimax_value(torch.tensor(u_np, dtype=T), w, mmd, radius, uniform, bug)
                    assert without.numpy().tobytes() == with_graph.detach().numpy().tobytes()


def test_the_compiled_closed_form_is_the_torch_one_to_the_bit() -> None:
    """minimax_step (paper profile's Adam step) = minimax_value_and_weights, value and weights,
    bit for bit: cases 2 and 3 mixed in one call, e* = 0 at a point-mass centre, ties."""
    from wdrbo_dist.acquisition.mmd.minimax_kernel import minimax_step

    generator = torch.Generator().manual_seed(3)
    size = 64
    grid = torch.linspace(0, 1, size, dtype=T)[:, None]
    gram = torch.exp(-0.5 * ((grid - grid.T) / 0.2) ** 2)
    centres = [torch.zeros(size, dtype=T).index_fill_(0, torch.tensor([7, 30, 31]), 1 / 3),
               torch.zeros(size, dtype=T).index_fill_(0, torch.tensor([12]), 1.0)]
    compared = 0
    for w in centres:
        mmd = point_mmd_squared(gram, w)
        distances = mmd.clamp_min(0.0).sqrt().numpy()
        for radius in (0.05, 0.4, 1.2):
            for _ in range(20):
                u = torch.randn(10, size, dtype=T, generator=generator).cumsum(-1)
                u[0] = 0.25  # every value tied
                u[1, 12] = u[1].min() - 1.0  # the minimum at the point mass: e* = 0
                expected = minimax_value_and_weights(u, w, mmd, radius)
                found = minimax_step(u, w, w.numpy(), distances, radius)
                if found is None:
                    continue
                assert expected is not None
                assert found[0].numpy().tobytes() == expected[0].numpy().tobytes()
                assert found[1].numpy().tobytes() == expected[1].numpy().tobytes()
                compared += 1
    assert compared > 100
    assert minimax_step(torch.full((2, size), torch.nan, dtype=T), w, w.numpy(), distances, 0.4) is None


def test_reference_case_3_bug_zeroes_case_3_only_when_a_case_2_is_in_the_call() -> None:
    both = _value([U_CASE2, U_CASE3], 0.9, uniform=True, bug=True)
    assert float(both[1]) == 0.0  # case 3 next to a case 2: the reference's 0
    assert float(both[0]) == pytest.approx(_expected(U_CASE2, W, K, 0.9, True))
    alone = _value([U_CASE3, U_CASE3 + 1.0], 0.9, uniform=True, bug=True)
    assert torch.equal(alone, torch.tensor([1.0, 2.0], dtype=T))  # no case 2 in the call: g
    fixed = _value([U_CASE2, U_CASE3], 0.9, uniform=True, bug=False)
    assert float(fixed[1]) == 1.0


def test_edge_cases_are_finite_with_finite_gradients() -> None:
    w_point = torch.tensor([0.0, 1.0, 0.0], dtype=T)  # w = delta at the argmin: e* = 0
    k = torch.tensor(K, dtype=T)
    for bug in (True, False):
        for uniform in (True, False):
            u = torch.tensor([[0.7, 0.7, 0.7], [2.0, 0.5, 1.0], [1.0, 1.0, 3.0]], dtype=T, requires_grad=True)
            for w in (torch.tensor(W, dtype=T), w_point):
                value = minimax_value(u, w, point_mmd_squared(k, w), 0.5, uniform, bug)
                (grad,) = torch.autograd.grad(value.sum(), u)
                assert torch.isfinite(value).all() and torch.isfinite(grad).all()
            # equal UCB values: the value is that common value (case 2 with tau = 0, or case 3)
            assert float(minimax_value(u[:1].detach(), torch.tensor(W, dtype=T), _mmd_squared(W), 0.5, uniform, False)[0]) == pytest.approx(0.7)
            # a zero MMD distance: case 3, the minimum
            assert float(minimax_value(u[1:2].detach(), w_point, point_mmd_squared(k, w_point), 0.5, uniform, False)[0]) == pytest.approx(0.5)


def test_profiles_and_the_acquisition_on_a_fitted_model() -> None:
    problem = make_problem("ackley")
    g = torch.Generator().manual_seed(0)
    x = torch.rand(20, 2, generator=g, dtype=T)
    obs = problem.observe(x, g)
    state = BOState(x, obs.context, obs.y)
    model, _ = fit_gp(torch.cat([x, obs.context], -1), obs.y, g, PAIRS)
    candidates = torch.rand(512, 2, generator=torch.Generator().manual_seed(1), dtype=T)
    grid = context_grid(problem.context_bounds, 1024, diagonal=True)
    w = empirical_pmf(state.context, grid)
    gram = context_gram(grid, model.lengthscale[2:])
    r = MMD_RADIUS_CONSTANT / math.sqrt(20)
    u = model.ucb_pairs(candidates, grid, 1.5)[0]
    values = {}
    for fidelity in ("paper", "reference"):
        algo = DRBOMMDMinimax(problem, fidelity)
        acq = algo.acquisition(model, state, torch.Generator())
        assert acq.radius == pytest.approx(r)
        values[fidelity] = acq(candidates)
        bug, uniform = fidelity == "reference", fidelity == "reference"
        assert torch.allclose(values[fidelity], minimax_value(u, w, point_mmd_squared(gram, w), r, uniform, bug), atol=1e-9)
        assert acq.telemetry.solves == 512
    # the fixed profile never returns the buggy zeros; the reference does when cases mix
    e_sq = 1 - 2 * (gram @ w)[u.argmin(-1)] + w @ gram @ w
    case3 = r > e_sq.clamp_min(0).sqrt()
    assert case3.any() and (~case3).any()  # this data mixes the cases (method §3.7: it happens constantly)
    assert torch.all(values["reference"][case3] == 0.0)
    assert torch.all(values["paper"][case3] == u.min(-1).values[case3])
    assert not torch.any(values["paper"] == 0.0)
