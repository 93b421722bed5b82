"""StableOpt (method §3.8): the searched box in each profile, the min value and its gradient."""

from __future__ import annotations

import pytest
import torch

from tests.support.routes import PAIRS, with_routes
from wdrbo_dist.acquisition.base import BOState
from wdrbo_dist.acquisition.sobol import scrambled_sobol
from wdrbo_dist.acquisition.stableopt import StableOpt, stable_box
from wdrbo_dist.models.fit import fit_gp
from wdrbo_dist.problems import make_problem
from wdrbo_dist.models.settings import NumericalSettings

T = torch.float64


def _state_and_model(problem_name: str = "modified-branin", n: int = 12, seed: int = 0):
    problem = make_problem(problem_name)
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, problem.dim_x, generator=g, dtype=T)
    obs = problem.observe(x, g)
    model, _ = fit_gp(torch.cat([x, obs.context], -1), obs.y, g, PAIRS)
    return problem, BOState(x, obs.context, obs.y), model


@pytest.mark.parametrize(("fidelity", "low_sigmas", "high_sigmas"), [("paper", -1.0, 1.0), ("reference", -3.0, -1.0)])
def test_searched_box_in_each_profile(fidelity: str, low_sigmas: float, high_sigmas: float) -> None:
    problem, state, model = _state_and_model()
    mean = state.context.mean(0)
    std = state.context.std(0)  # unbiased, as the reference
    acq = StableOpt(problem, fidelity).acquisition(model, state, torch.Generator().manual_seed(1))
    points = acq.contexts()
    low, high = mean + low_sigmas * std, mean + high_sigmas * std
    assert torch.all(points >= low - 1e-12) and torch.all(points <= high + 1e-12)
    # the Sobol points fill the whole box
    assert torch.allclose(points.min(0).values, low, atol=0.01 * float(std.max()) * 2)
    assert torch.allclose(points.max(0).values, high, atol=0.01 * float(std.max()) * 2)


def test_box_helper_and_switch_override() -> None:
    c = torch.tensor([[0.2], [0.4], [0.6]], dtype=T)  # mean 0.4, unbiased std 0.2
    assert torch.allclose(stable_box(c, 1.0, sign_bug=False), torch.tensor([[0.2], [0.6]], dtype=T))
    # reference: c = (mu - s) + ((mu - s) - (mu + s)) v, v in [0, 1): the box [mu - 3s, mu - s]
    assert torch.allclose(stable_box(c, 1.0, sign_bug=True), torch.tensor([[0.2], [-0.2]], dtype=T))
    algo = StableOpt(make_problem("ackley"), "reference", {"stable_box_sign_bug": False})
    assert algo.options["stable_box_sign_bug"] is False


@pytest.mark.parametrize("adam_pass", ["compiled", "torch"])
def test_value_is_the_min_ucb_over_the_calls_points_and_the_gradient_is_at_the_argmin(
    adam_pass: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the CPU (NumericalSettings.adam_pass `compiled`) the pair kernel gives the minimum and
    its x-gradient at the minimising contexts, without torch's recomputation there; on torch's
    pass (another device's), torch's posterior and autograd give them. Both are the direct
    posterior's minimum and its gradient at the arg-min, to rounding."""
    compiled_gradient = adam_pass == "compiled"
    problem, state, model = _state_and_model()
    acq = StableOpt(problem, "paper").acquisition(
        with_routes(model, adam_pass=adam_pass), state, torch.Generator().manual_seed(3))
    replay = torch.Generator().manual_seed(3)
    box = stable_box(state.context, 1.0, sign_bug=False)
    points = box[0] + (box[1] - box[0]) * scrambled_sobol(1024, 2, replay)
    x = torch.rand(5, 2, generator=torch.Generator().manual_seed(4), dtype=T).requires_grad_(True)
    recomputed = []
    ucb = type(model).ucb
    monkeypatch.setattr(type(model), "ucb", lambda *args: recomputed.append(1) or ucb(*args))
    value = acq(x)
    monkeypatch.undo()
    assert bool(recomputed) is not compiled_gradient
    pairs = torch.cat([x.detach().unsqueeze(1).expand(5, 1024, 2), points.unsqueeze(0).expand(5, 1024, 2)], -1)
    u = model.ucb(pairs, 1.5)
    expected, index = u.min(-1)
    assert torch.allclose(value.detach(), expected, atol=1e-8)
    (grad,) = torch.autograd.grad(value.sum(), x)
    xx = x.detach().clone().requires_grad_(True)
    at_argmin = model.ucb(torch.cat([xx, points[index]], -1), 1.5)
    (expected_grad,) = torch.autograd.grad(at_argmin.sum(), xx)
    assert torch.allclose(grad, expected_grad, atol=1e-10)


@pytest.mark.parametrize("fidelity", ["paper", "reference"])
def test_the_kernel_gradient_is_the_cpus_route_in_both_profiles(fidelity: str) -> None:
    problem, state, model = _state_and_model()
    x = torch.rand(5, 2, generator=torch.Generator().manual_seed(4), dtype=T)
    for device, taken in (("cpu", True), ("cuda", False)):  # (the settings of a GPU run, on CPU tensors)
        routed = with_routes(model, **vars(NumericalSettings.for_run(device)))
        acq = StableOpt(problem, fidelity).acquisition(routed, state, torch.Generator().manual_seed(3))
        assert (acq.value_and_gradient(x) is not None) is taken


def test_contexts_are_redrawn_at_every_call() -> None:
    problem, state, model = _state_and_model("ackley")
    acq = StableOpt(problem, "reference").acquisition(model, state, torch.Generator().manual_seed(0))
    x = torch.rand(3, 2, generator=torch.Generator().manual_seed(1), dtype=T)
    with torch.no_grad():
        assert not torch.equal(acq(x), acq(x))


def test_fresh_context_ucb_matches_the_gp_posterior_on_both_paths() -> None:
    from wdrbo_dist.acquisition.fresh_contexts import DIRECT_MAX_BATCH, FreshContextUCB

    problem, state, model = _state_and_model("modified-branin", n=30)
    ucb = FreshContextUCB(model, 1.5)
    contexts = torch.rand(200, 2, generator=torch.Generator().manual_seed(1), dtype=T)
    for b in (3, DIRECT_MAX_BATCH + 5):
        x = torch.rand(b, 2, generator=torch.Generator().manual_seed(b), dtype=T)
        pairs = torch.cat([x.unsqueeze(1).expand(b, 200, 2), contexts.unsqueeze(0).expand(b, 200, 2)], -1)
        assert torch.allclose(ucb(x, contexts), model.ucb(pairs, 1.5), atol=1e-8)
