"""WDRBO (method §3.1) and ERBO (method §3.2)."""

from __future__ import annotations

import math

import torch

from tests.support.routes import PAIRS, with_routes
from wdrbo_dist.acquisition.base import BOState
from wdrbo_dist.acquisition.wdrbo import ERBO, WDRBO
from wdrbo_dist.models.fit import fit_gp
from wdrbo_dist.problems import make_problem
from wdrbo_dist.models.settings import NumericalSettings


def _state_and_model(problem_name: str = "ackley", n: int = 12, seed: int = 0):
    problem = make_problem(problem_name)
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, problem.dim_x, generator=g, dtype=torch.float64)
    obs = problem.observe(x, g)
    state = BOState(x, obs.context, obs.y)
    model, _ = fit_gp(torch.cat([x, obs.context], -1), obs.y, g, PAIRS)
    return problem, state, model


def test_wdrbo_value_is_mean_ucb_minus_radius_times_lipschitz() -> None:
    problem, state, model = _state_and_model()
    algo = WDRBO(problem, "paper")
    algo.setup(state, torch.Generator().manual_seed(1))
    acq = algo.acquisition(model, state, torch.Generator().manual_seed(2))
    assert acq.radius == 0.3 / math.sqrt(state.n)
    x = torch.rand(7, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    pairs = torch.cat([x.unsqueeze(1).expand(7, state.n, 2), state.context.expand(7, state.n, 1)], -1)
    mean_ucb = model.ucb(pairs, 1.5).mean(-1)
    assert torch.allclose(acq(x), mean_ucb - acq.radius * acq.lipschitz(x))


def test_lipschitz_constant_matches_finite_differences() -> None:
    problem, state, model = _state_and_model("modified-branin", n=15)
    algo = WDRBO(problem, "paper", {"lipschitz_points": 30})
    algo.setup(state, torch.Generator().manual_seed(1))
    acq = algo.acquisition(model, state, torch.Generator().manual_seed(2))
    x = torch.rand(4, 2, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    h = 1e-6
    expected = []
    for xi in x:
        norms = []
        for c in acq.lipschitz_points:
            grad = []
            for k in range(problem.dim_c):
                up, down = c.clone(), c.clone()
                up[k] += h
                down[k] -= h
                u = model.ucb(torch.cat([xi, up]).unsqueeze(0), 1.5)
                d = model.ucb(torch.cat([xi, down]).unsqueeze(0), 1.5)
                grad.append(float(u - d) / (2 * h))
            norms.append(math.hypot(*grad))
        expected.append(max(norms))
    assert torch.allclose(acq.lipschitz(x), torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=1e-6)


def test_detached_lipschitz_term_adds_no_gradient() -> None:
    problem, state, model = _state_and_model()
    x = torch.rand(5, 2, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    grads = {}
    for detached in (True, False):
        algo = WDRBO(problem, "paper", {"wdrbo_L_detached": detached})
        algo.setup(state, torch.Generator().manual_seed(1))
        acq = algo.acquisition(model, state, torch.Generator().manual_seed(2))
        xr = x.clone().requires_grad_(True)
        (grads[detached],) = torch.autograd.grad(acq(xr).sum(), xr)
    xr = x.clone().requires_grad_(True)
    (mean_grad,) = torch.autograd.grad(acq.expected_ucb(xr).sum(), xr)
    assert torch.allclose(grads[True], mean_grad)
    assert not torch.allclose(grads[False], mean_grad)


def test_closed_form_and_autograd_lipschitz_gradients_agree() -> None:
    """NumericalSettings.wdrbo_L_gradient: the acquisition values and gradients agree to rounding."""
    problem, state, model = _state_and_model("modified-branin", n=20)
    x = torch.rand(6, 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    values, grads = {}, {}
    for route in ("analytic", "autograd"):
        algo = WDRBO(problem, "paper")
        algo.setup(state, torch.Generator().manual_seed(1))
        acq = algo.acquisition(with_routes(model, wdrbo_L_gradient=route), state, torch.Generator().manual_seed(2))
        xr = x.clone().requires_grad_(True)
        values[route] = acq(xr)
        (grads[route],) = torch.autograd.grad(values[route].sum(), xr)
    assert torch.allclose(values["analytic"].detach(), values["autograd"].detach(), rtol=0, atol=1e-12)
    assert torch.allclose(grads["analytic"], grads["autograd"], rtol=1e-9, atol=1e-12)
    assert NumericalSettings.for_run("cpu").wdrbo_L_gradient == "analytic"


def test_erbo_is_wdrbo_at_radius_zero() -> None:
    problem, state, model = _state_and_model()
    erbo = ERBO(problem, "paper")
    erbo.setup(state, torch.Generator().manual_seed(1))
    wdrbo = WDRBO(problem, "paper", {"radius_constant": 0.0})
    wdrbo.setup(state, torch.Generator().manual_seed(1))
    x = torch.rand(9, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    a = erbo.acquisition(model, state, torch.Generator())(x)
    b = wdrbo.acquisition(model, state, torch.Generator())(x)
    assert torch.equal(a, b)


def test_general_setting_uses_the_given_centre_and_radius() -> None:
    problem = make_problem("toy-general")
    centre = problem.centre_distribution()
    assert centre is not None
    g = torch.Generator().manual_seed(0)
    x = torch.rand(10, 1, generator=g, dtype=torch.float64)
    obs = problem.observe(problem.decision_bounds[0] + 2 * x, g)
    state = BOState(x, obs.context, obs.y)
    model, _ = fit_gp(torch.cat([x, obs.context], -1), obs.y, g, PAIRS)
    algo = WDRBO(problem, "paper")
    algo.setup(state, g)
    acq = algo.acquisition(model, state, g)
    assert acq.radius == centre.radius
    assert torch.equal(acq.nodes, centre.nodes) and torch.equal(acq.weights, centre.weights)
    assert float(centre.weights.sum()) == 1.0 or abs(float(centre.weights.sum()) - 1.0) < 1e-12


def test_paper_profile_differentiates_lipschitz_term_and_reference_detaches_it() -> None:
    """method §8.8 and the project decision: the paper's argmax in `paper`, the code's in `reference`."""
    assert WDRBO.resolve_options("paper", {})["wdrbo_L_detached"] is False
    assert WDRBO.resolve_options("reference", {})["wdrbo_L_detached"] is True


def test_differentiated_acquisition_gradient_matches_finite_differences() -> None:
    problem, state, model = _state_and_model()
    algo = WDRBO(problem, "paper")
    algo.setup(state, torch.Generator().manual_seed(1))
    acq = algo.acquisition(model, state, torch.Generator().manual_seed(2))
    x = torch.rand(3, 2, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    xr = x.clone().requires_grad_(True)
    value = acq(xr)
    (grad,) = torch.autograd.grad(value.sum(), xr)
    with torch.no_grad():
        assert torch.allclose(value, acq(x), rtol=0, atol=1e-12)  # the same value with or without autograd
    h = 1e-6
    numeric = torch.zeros_like(x)
    for k in range(2):
        step = torch.zeros_like(x)
        step[:, k] = h
        numeric[:, k] = (acq(x + step) - acq(x - step)) / (2 * h)
    assert torch.allclose(grad, numeric, rtol=1e-4, atol=1e-5)


def test_lipschitz_points_cover_the_observed_contexts_in_the_paper_profile() -> None:
    """The toy's contexts (P* = N(0.6, 0.2^2), not clipped) leave the box [0, 1]: the paper
    profile stretches the points' box to every observed context; the code keeps [0, 1]."""
    contexts = torch.tensor([[0.6], [-0.15], [1.3], [0.5]], dtype=torch.float64)
    state = BOState(torch.zeros(4, 1, dtype=torch.float64), contexts, torch.zeros(4, dtype=torch.float64))
    algo = WDRBO(make_problem("toy-general", "paper"), "paper")
    algo.setup(state, torch.Generator().manual_seed(0))
    assert algo.lipschitz_box(state).tolist() == [[-0.15], [1.3]]
    points = algo.lipschitz_points(state)[:, 0]
    assert -0.15 <= float(points.min()) < 0.0 and 1.0 < float(points.max()) <= 1.3
    # Inside the box, the box stays the domain's.
    inside = BOState(state.x, torch.tensor([[0.2], [0.4], [0.6], [0.8]], dtype=torch.float64), state.y)
    assert algo.lipschitz_box(inside).tolist() == [[0.0], [1.0]]
    reference = WDRBO(make_problem("toy-general", "reference"), "reference")
    reference.setup(state, torch.Generator().manual_seed(0))
    assert reference.lipschitz_box(state).tolist() == [[0.0], [1.0]]
