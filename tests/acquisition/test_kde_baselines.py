"""KDE sampling (method §3.4), SBO-KDE (3.4) and DRBO-KDE (3.5): closed form against the CVXPY LP."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.support.routes import PAIRS
from wdrbo_dist.acquisition.base import BOState
from wdrbo_dist.acquisition.drbo_kde import (
    DRBOKDE,
    drbo_kde_inner_cvxpy,
    tv_sorted_weights,
    tv_worst_case,
)
from wdrbo_dist.acquisition.kde import kde_samples, silverman_bandwidth
from wdrbo_dist.acquisition.sbo_kde import SBOKDE
from wdrbo_dist.models.fit import fit_gp
from wdrbo_dist.problems import make_problem


def _state_and_model(problem_name: str = "ackley", n: int = 12, seed: int = 0):
    problem = make_problem(problem_name)
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, problem.dim_x, generator=g, dtype=torch.float64)
    obs = problem.observe(x, g)
    model, _ = fit_gp(torch.cat([x, obs.context], -1), obs.y, g, PAIRS)
    return problem, BOState(x, obs.context, obs.y), model


def _pairs(x: torch.Tensor, contexts: torch.Tensor) -> torch.Tensor:
    b, n = x.shape[0], contexts.shape[0]
    return torch.cat([x.unsqueeze(1).expand(b, n, -1), contexts.unsqueeze(0).expand(b, n, -1)], -1)


# --- KDE ----------------------------------------------------------------------------------------


def test_silverman_bandwidth_uses_the_population_std() -> None:
    c = torch.tensor([[0.1, 0.5], [0.3, 0.5], [0.8, 0.9]], dtype=torch.float64)
    n, d = 3, 2
    factor = (4 / (d + 2)) ** (1 / (d + 4)) * n ** (-1 / (d + 4))
    expected = factor * torch.from_numpy(np.std(c.numpy(), axis=0, ddof=0))
    assert torch.allclose(silverman_bandwidth(c), expected)


def test_kde_samples_are_clamped_reproducible_and_centred_on_the_data() -> None:
    c = torch.tensor([[0.02], [0.5], [0.97], [0.6]], dtype=torch.float64)
    bounds = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    a = kde_samples(c, 4000, bounds, torch.Generator().manual_seed(1))
    b = kde_samples(c, 4000, bounds, torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    assert a.shape == (4000, 1) and float(a.min()) >= 0.0 and float(a.max()) <= 1.0
    assert (a == 0.0).any() and (a == 1.0).any()  # censored at the bounds, not truncated
    assert abs(float(a.mean()) - float(c.mean())) < 0.03


def test_kde_of_identical_contexts_has_zero_bandwidth() -> None:
    c = torch.full((5, 2), 0.4, dtype=torch.float64)
    s = kde_samples(c, 10, torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=torch.float64), torch.Generator().manual_seed(0))
    assert torch.allclose(s, torch.full((10, 2), 0.4, dtype=torch.float64))


# --- SBO-KDE ------------------------------------------------------------------------------------


def test_sbo_kde_is_the_mean_ucb_over_its_samples() -> None:
    problem, state, model = _state_and_model("modified-branin")
    algo = SBOKDE(problem, "paper")
    acq = algo.acquisition(model, state, torch.Generator().manual_seed(3))
    samples = kde_samples(state.context, 512, problem.context_bounds, torch.Generator().manual_seed(3))
    x = torch.rand(6, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    expected = model.ucb(_pairs(x, samples), 1.5).mean(-1)
    assert torch.allclose(acq(x), expected, atol=1e-8)


# --- DRBO-KDE closed form against the LP --------------------------------------------------------


def test_sorted_weights() -> None:
    w = tv_sorted_weights(10, 0.45)  # delta = 0.225 -> 2 full weights and 0.25
    assert torch.allclose(w, torch.tensor([1.0, 1.0, 0.25], dtype=torch.float64))
    assert torch.equal(tv_sorted_weights(10, 5.0), torch.ones(10, dtype=torch.float64))  # delta capped at 1
    assert tv_sorted_weights(10, 0.0).numel() == 0


def test_closed_form_agrees_with_the_cvxpy_program_on_random_instances() -> None:
    rng = np.random.default_rng(0)
    worst = 0.0
    for trial in range(300):
        size = (3, 17, 100, 256)[trial % 4]
        u = rng.normal(size=size) * rng.uniform(0.1, 3.0)
        if trial % 5 == 0:
            u = np.round(u, 1)  # ties
        m = float(u.min() - rng.exponential(1.0)) if trial % 3 else float(rng.uniform(u.min(), u.max()))
        eps = float(rng.uniform(0.0, 2.5))
        solved = drbo_kde_inner_cvxpy(u, m, eps)
        assert solved is not None
        closed = float(tv_worst_case(torch.from_numpy(u)[None], torch.tensor([m]), eps)[0])
        worst = max(worst, abs(closed - solved[0]))
    assert worst <= 1e-6, worst


def test_lp_route_gives_the_closed_form_value_and_gradient() -> None:
    problem, state, model = _state_and_model("ackley", n=10)
    x = torch.rand(4, 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    values, grads = [], []
    for closed in (True, False):
        algo = DRBOKDE(problem, "reference", {"drbokde_closed_form": closed, "kde_samples": 256, "min_points": 256})
        acq = algo.acquisition(model, state, torch.Generator().manual_seed(11))
        xx = x.clone().requires_grad_(True)
        v = acq(xx)
        (g,) = torch.autograd.grad(v.sum(), xx)
        values.append(v.detach())
        grads.append(g)
        assert acq.telemetry.solves == 4 and acq.telemetry.failures == 0
    assert torch.allclose(values[0], values[1], atol=1e-6)
    # Both are envelope gradients through u; they can differ only on the one fractional weight.
    assert torch.allclose(grads[0], grads[1], atol=0.05 * float(grads[0].abs().max()) + 1e-6)


def test_drbo_kde_value_matches_a_direct_computation() -> None:
    problem, state, model = _state_and_model("modified-branin", n=9)
    for fidelity, box in (("paper", (0.0, 1.0)), ("reference", (0.0, -1.0))):
        algo = DRBOKDE(problem, fidelity)
        assert torch.equal(algo.min_box(), torch.tensor([[box[0]] * 2, [box[1]] * 2], dtype=torch.float64))
        acq = algo.acquisition(model, state, torch.Generator().manual_seed(5))
        assert acq.radius == pytest.approx(state.n ** (-2 / 6))
        # Replay the generator: the KDE samples first, then this call's Sobol scramble.
        g = torch.Generator().manual_seed(5)
        samples = kde_samples(state.context, 1024, problem.context_bounds, g)
        from wdrbo_dist.acquisition.sobol import scrambled_sobol

        v = scrambled_sobol(1024, 2, g)
        low, high = algo.min_box()[0], algo.min_box()[1]
        sobol = low + (high - low) * v
        x = torch.rand(5, 2, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
        u = model.ucb(_pairs(x, samples), 1.5)
        m = model.ucb(_pairs(x, sobol), 1.5).amin(-1)
        expected = tv_worst_case(u, m, acq.radius)
        assert torch.allclose(acq(x), expected, atol=1e-7)
        if fidelity == "reference":
            assert float(sobol.max()) <= 0.0  # the sign bug searches [-1, 0]^2


def test_min_term_is_redrawn_at_every_call() -> None:
    problem, state, model = _state_and_model("ackley", n=8)
    acq = DRBOKDE(problem, "paper").acquisition(model, state, torch.Generator().manual_seed(0))
    a, b = acq.minimum_points(), acq.minimum_points()
    assert not torch.equal(a, b)


def test_radius_and_overridable_switches() -> None:
    problem = make_problem("ackley")
    algo = DRBOKDE(problem, "reference", {"drbokde_minbox_sign_bug": False, "radius_scale": 2.0})
    assert algo.radius(32) == pytest.approx(2.0 * 32 ** (-0.4))
    assert torch.equal(algo.min_box(), torch.tensor([[0.0], [1.0]], dtype=torch.float64))
    assert math.isclose(DRBOKDE(problem, "paper").radius(5), 5 ** (-0.4))


def test_equal_ucb_values_give_finite_values() -> None:
    u = torch.full((3, 64), 0.25, dtype=torch.float64)
    for m in (torch.full((3,), 0.25, dtype=torch.float64), torch.full((3,), -1.0, dtype=torch.float64)):
        value = tv_worst_case(u, m, 0.4)
        assert torch.isfinite(value).all()
    assert torch.allclose(tv_worst_case(u, torch.full((3,), 0.25, dtype=torch.float64), 0.4), u[:, 0])
    # all mass movable (eps / 2 >= 1): the value is mean(min(u, m))
    assert torch.allclose(tv_worst_case(u, torch.full((3,), -1.0, dtype=torch.float64), 3.0), torch.full((3,), -1.0, dtype=torch.float64))
