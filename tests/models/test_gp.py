"""The GP of method §1.4 is BoTorch's default SingleTaskGP, fitted the same way, only faster."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from botorch.fit import fit_gpytorch_mll
from botorch.models import SingleTaskGP
from gpytorch.mlls import ExactMarginalLogLikelihood

from tests.support.routes import PAIRS
from wdrbo_dist.models.context_features import REGION_RESIDUAL_MAX, projected
from wdrbo_dist.models.fit import fit_gp, standardize
from wdrbo_dist.models.gp import GaussianProcess, context_gradient_jacobian
from wdrbo_dist.models.kernel import numerical_basis, rbf
from wdrbo_dist.models.pair_routes import FORMS_MAX_BATCH, FORMS_MIN_POINTS
from wdrbo_dist.models.compiled_fit import CompiledMapObjective
from wdrbo_dist.models.map_objective import LENGTHSCALE_MIN, NOISE_MIN, lengthscale_prior


def _data(n: int, dim: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, dim, generator=g, dtype=torch.float64)
    y = torch.sin(6 * x).sum(-1) + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return x, y


@pytest.mark.parametrize("n,dim", [(8, 2), (40, 3)])
def test_fit_matches_botorch_single_task_gp(n: int, dim: int) -> None:
    x, y = _data(n, dim)
    ours, report = fit_gp(x, y, torch.Generator().manual_seed(0), PAIRS)
    assert report.converged and report.attempts == 1
    y_std, _, _ = standardize(y)
    reference = SingleTaskGP(x, y_std.unsqueeze(-1))
    fit_gpytorch_mll(ExactMarginalLogLikelihood(reference.likelihood, reference))
    assert torch.allclose(ours.lengthscale, reference.covar_module.lengthscale.detach().squeeze(0), rtol=2e-3)
    assert ours.noise == pytest.approx(reference.likelihood.noise.item(), rel=5e-3, abs=1e-6)
    assert ours.mean_constant == pytest.approx(reference.mean_module.constant.item(), abs=2e-3)


def test_posterior_equals_botorch_with_the_same_hyperparameters() -> None:
    x, y = _data(30, 3, seed=1)
    y_std, _, _ = standardize(y)
    reference = SingleTaskGP(x, y_std.unsqueeze(-1))
    fit_gpytorch_mll(ExactMarginalLogLikelihood(reference.likelihood, reference))
    reference.eval()
    ours = GaussianProcess(
        x,
        y_std,
        reference.covar_module.lengthscale.detach().squeeze(0),
        reference.likelihood.noise.item(),
        reference.mean_module.constant.item(),
    )
    z = torch.rand(100, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    mean, var = ours.posterior(z)
    post = reference.posterior(z)
    assert torch.allclose(mean, post.mean.squeeze(-1), atol=1e-9)
    assert torch.allclose(var, post.variance.squeeze(-1), atol=1e-9)


def test_map_objective_equals_gpytorch_marginal_log_likelihood_plus_priors() -> None:
    x, y = _data(20, 2, seed=3)
    y_std, _, _ = standardize(y)
    theta = np.array([0.3, 0.7, 0.02, 0.1])
    value, _ = CompiledMapObjective(x.numpy(), y_std.numpy(), lengthscale_prior(2))(theta)
    model = SingleTaskGP(x, y_std.unsqueeze(-1))
    model.covar_module.lengthscale = torch.tensor([[0.3, 0.7]], dtype=torch.float64)
    model.likelihood.noise = torch.tensor([0.02], dtype=torch.float64)
    model.mean_module.constant.data.fill_(0.1)
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    model.train()
    output = model(*model.train_inputs)
    # The Standardize outcome transform of SingleTaskGP adds a log-det term that is 0 here
    # (y is already standardised), so the objectives coincide.
    assert value == pytest.approx(-mll(output, model.train_targets).item(), abs=1e-8)


def test_map_objective_gradient_matches_finite_differences() -> None:
    x, y = _data(15, 3, seed=4)
    objective = CompiledMapObjective(x.numpy(), standardize(y)[0].numpy(), lengthscale_prior(3))
    theta = np.array([0.2, 0.5, 0.9, 0.03, -0.2])
    _, grad = objective(theta)
    for i in range(theta.size):
        h = 1e-6 * max(1.0, abs(theta[i]))
        up, down = theta.copy(), theta.copy()
        up[i] += h
        down[i] -= h
        numeric = (objective(up)[0] - objective(down)[0]) / (2 * h)
        assert grad[i] == pytest.approx(numeric, rel=1e-5, abs=1e-7)


def test_fit_respects_bounds_and_handles_constant_targets() -> None:
    x, _ = _data(6, 2, seed=5)
    model, _ = fit_gp(x, torch.full((6,), 3.0, dtype=torch.float64), torch.Generator().manual_seed(0))
    assert bool((model.lengthscale >= LENGTHSCALE_MIN).all()) and model.noise >= NOISE_MIN
    mean, var = model.posterior(x)
    assert torch.isfinite(mean).all() and torch.isfinite(var).all()


def test_analytic_ucb_gradient_matches_autograd() -> None:
    x, y = _data(25, 3, seed=6)
    model, _ = fit_gp(x, y, torch.Generator().manual_seed(0), PAIRS)
    z = torch.rand(40, 3, generator=torch.Generator().manual_seed(7), dtype=torch.float64, requires_grad=True)
    ucb, grad = model.ucb_and_gradient(z, beta=1.5, dims=slice(1, 3))
    (auto,) = torch.autograd.grad(model.ucb(z, 1.5).sum(), z)
    assert torch.allclose(ucb, model.ucb(z, 1.5))
    assert torch.allclose(grad, auto[:, 1:], atol=1e-8)
    assert bool(torch.isfinite(grad).all())


@pytest.mark.parametrize(("dim_x", "dim_c"), [(1, 1), (2, 1), (1, 2), (3, 2)])
def test_context_gradient_norm_has_the_direct_values_and_autograds_x_gradient(dim_x: int, dim_c: int) -> None:
    """WDRBO's differentiated L(x): the values of `ucb_and_gradient`'s norm, and the closed-form
    x-gradient is the double backward through it, to rounding."""
    train, y = _data(30, dim_x + dim_c, seed=12)
    model, _ = fit_gp(train, y, torch.Generator().manual_seed(0), PAIRS)
    g = torch.Generator().manual_seed(13)
    x = torch.rand(9, dim_x, generator=g, dtype=torch.float64, requires_grad=True)
    contexts = torch.rand(9, dim_c, generator=g, dtype=torch.float64)
    norm = model.context_gradient_norm(x, contexts, 1.5)
    (closed_form,) = torch.autograd.grad(norm.sum(), x)
    _, direct = model.ucb_and_gradient(torch.cat([x, contexts], -1), 1.5, slice(dim_x, None))
    (double_backward,) = torch.autograd.grad(direct.norm(dim=-1).sum(), x)
    assert torch.allclose(norm.detach(), direct.norm(dim=-1).detach(), rtol=1e-11, atol=0)
    assert torch.allclose(closed_form, double_backward, rtol=1e-9, atol=1e-9 * float(double_backward.abs().max()))
    assert torch.autograd.gradcheck(lambda v: model.context_gradient_norm(v, contexts[:3], 1.5), (x.detach()[:3].requires_grad_(),))
    # the formula in torch (the route off the CPU) gives what NumPy gives on it
    arrays = (x.detach(), contexts, model.train_x, model.lengthscale, model.inverse, model.weights)
    on_device = context_gradient_jacobian(torch, *arrays, 1.5)
    on_cpu = context_gradient_jacobian(np, *(a.numpy() for a in arrays), 1.5)
    for got, expected in zip(on_device, on_cpu):
        assert np.allclose(got.numpy(), expected, rtol=1e-11, atol=1e-11 * np.abs(expected).max())


@pytest.mark.parametrize("dim_c", [1, 2])
def test_pairwise_ucb_and_context_gradient_equal_the_direct_computation(dim_c: int) -> None:
    x, y = _data(40, 2 + dim_c, seed=8)
    model, _ = fit_gp(x, y, torch.Generator().manual_seed(0), PAIRS)
    g = torch.Generator().manual_seed(9)
    cand = torch.rand(300, 2, generator=g, dtype=torch.float64)  # more than one chunk
    contexts = torch.rand(17, dim_c, generator=g, dtype=torch.float64)
    points = torch.rand(11, dim_c, generator=g, dtype=torch.float64)
    ucb, grad = model.ucb_pairs(cand, contexts, 1.5, gradient_contexts=points)
    pairs = torch.cat([cand.unsqueeze(1).expand(-1, 17, -1), contexts.expand(300, -1, -1)], -1)
    assert torch.allclose(ucb, model.ucb(pairs, 1.5), atol=1e-7)
    grad_pairs = torch.cat([cand.unsqueeze(1).expand(-1, 11, -1), points.expand(300, -1, -1)], -1)
    _, direct = model.ucb_and_gradient(grad_pairs, 1.5, slice(2, None))
    assert grad is not None and torch.allclose(grad, direct, atol=1e-6)


def test_detached_context_gradients_keep_values_and_the_value_gradient() -> None:
    x, y = _data(40, 3, seed=10)
    model, _ = fit_gp(x, y, torch.Generator().manual_seed(0), PAIRS)
    g = torch.Generator().manual_seed(11)
    contexts, points = torch.rand(17, 1, generator=g, dtype=torch.float64), torch.rand(11, 1, generator=g, dtype=torch.float64)
    features = model.context_features(contexts, points)
    results = {}
    for detach in (False, True):
        cand = torch.rand(150, 2, generator=torch.Generator().manual_seed(12), dtype=torch.float64).requires_grad_(True)
        ucb, grad = model.ucb_from_features(cand, features, 1.5, detach_gradient=detach)
        assert grad is not None
        (d_value,) = torch.autograd.grad(ucb.sum(), cand)
        results[detach] = (ucb.detach(), grad.detach(), d_value)
    for kept, detached in zip(results[False], results[True]):
        assert torch.allclose(kept, detached, rtol=1e-9, atol=1e-9)  # the same sums, split


def _on_basis(model: GaussianProcess) -> GaussianProcess:
    return GaussianProcess(model.train_x, model.train_y, model.lengthscale, model.noise, model.mean_constant,
                           settings=replace(PAIRS, context_basis=True))


@pytest.mark.parametrize("dim_c", [1, 2])
@pytest.mark.parametrize("detach", [False, True])
def test_the_basis_route_gives_the_direct_values_and_gradients(dim_c: int, detach: bool) -> None:
    """The context-basis route of `ucb_from_features`: the UCB, its context gradients and its
    gradient in x are the direct computation's (a Cholesky solve per pair) to the basis's cut
    (the UCB within 1e-7, far inside the noise's sd), the pairs route's to rounding; the model
    takes the basis only where it costs less."""
    x, y = _data(60, 2 + dim_c, seed=13)
    pairs_model, _ = fit_gp(x, y, torch.Generator().manual_seed(0), PAIRS)
    basis_model = _on_basis(pairs_model)
    g = torch.Generator().manual_seed(14)
    contexts = torch.rand(200, dim_c, generator=g, dtype=torch.float64)
    points = torch.rand(30, dim_c, generator=g, dtype=torch.float64)
    cand = torch.rand(150, 2, generator=g, dtype=torch.float64)  # more than one chunk
    pairs = torch.cat([cand.unsqueeze(1).expand(-1, 200, -1), contexts.expand(150, -1, -1)], -1)
    z = pairs.clone().requires_grad_(True)
    direct = pairs_model.ucb(z, 1.5)
    (direct_dx,) = torch.autograd.grad(direct.sum(), z)
    grad_pairs = torch.cat([cand.unsqueeze(1).expand(-1, 30, -1), points.expand(150, -1, -1)], -1)
    _, direct_grad = pairs_model.ucb_and_gradient(grad_pairs, 1.5, slice(2, None))
    errors = {}
    for model in (pairs_model, basis_model):
        features = model.context_features(contexts, points)
        # two context dimensions: the basis needs about n vectors, the pairs cost less and are kept
        assert (features.basis is not None) == (model.context_basis and dim_c == 1)
        c = cand.clone().requires_grad_(True)
        ucb, grad = model.ucb_from_features(c, features, 1.5, detach_gradient=detach)
        (dx,) = torch.autograd.grad(ucb.sum(), c)
        assert grad is not None
        direct_x = direct_dx[..., :2].sum(1)
        errors[model.context_basis] = (  # the values', then relative to the largest gradient
            float((ucb - direct).abs().max()), float((grad - direct_grad).abs().max() / direct_grad.abs().max()),
            float((dx - direct_x).abs().max() / direct_x.abs().max()),
        )
    basis_errors, pairs_errors = errors[True], errors[False]
    assert max(pairs_errors) < 1e-10, pairs_errors
    assert basis_errors[0] < 1e-7 and max(basis_errors[1:]) < 1e-7, basis_errors
    if dim_c == 1:  # a smooth kernel on one context dimension: a small basis
        assert basis_model.context_features(contexts).basis.shape[1] < 40


def test_the_basis_forms_from_one_product_are_the_batched_products_forms_to_rounding() -> None:
    """`_basis_forms`: every candidate's B_b = V^T (kx_b * K^{-1} (kx_b * V)) from one product with
    V^T is (kx_b * V)^T K^{-1} (kx_b * V), a batch of [r, n] x [n, r] products, to ~1e-15, and
    autograd's x-gradient through it is the batched products' to ~1e-13 relative."""
    x, y = _data(80, 3, seed=21)
    pairs_model, _ = fit_gp(x, y, torch.Generator().manual_seed(0), PAIRS)
    model = _on_basis(pairs_model)
    g = torch.Generator().manual_seed(22)
    contexts = torch.rand(300, 1, generator=g, dtype=torch.float64)
    cand = torch.rand(150, 2, generator=g, dtype=torch.float64)  # more than one chunk
    features = model.context_features(contexts)
    assert features.basis is not None
    basis, weights = features.basis, torch.randn(150, features.basis.shape[1], features.basis.shape[1], generator=g,
                                                 dtype=torch.float64)
    results = []
    for batched in (False, True):
        c = cand.clone().requires_grad_(True)
        k_x = rbf(c, x[:, :2], model.lengthscale[:2])
        if batched:
            (b, n), r = k_x.shape, basis.shape[1]
            weighted = k_x.unsqueeze(-1) * basis  # [c, n, r]
            solved = (model.inverse @ weighted.transpose(0, 1).reshape(n, b * r)).reshape(n, b, r).transpose(0, 1)
            forms = weighted.transpose(1, 2) @ solved
        else:
            forms = model._basis_forms(k_x, basis)
        results.append((forms.detach(), torch.autograd.grad((forms * weights).sum(), c)[0]))
    (forms, grad), (expected, expected_grad) = results
    assert torch.allclose(forms, expected, rtol=0, atol=1e-13)
    assert torch.allclose(grad, expected_grad, rtol=0, atol=1e-13 * float(expected_grad.abs().max()))


def test_numerical_basis_spans_the_vectors_and_keeps_nothing_of_zero_vectors() -> None:
    g = torch.Generator().manual_seed(15)
    vectors = torch.rand(50, 4, generator=g, dtype=torch.float64) @ torch.rand(4, 30, generator=g, dtype=torch.float64)
    basis, coefficients = numerical_basis(vectors)
    assert basis.shape == (30, 4) and coefficients.shape == (50, 4)
    assert torch.allclose(basis.T @ basis, torch.eye(4, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(coefficients @ basis.T, vectors, atol=1e-12)
    basis, coefficients = numerical_basis(torch.zeros(5, 3, dtype=torch.float64))
    assert basis.shape == (3, 0) and coefficients.shape == (5, 0)


def test_a_relative_tolerance_cuts_the_basis_at_that_singular_value_and_no_lower_than_numpys() -> None:
    """`numerical_basis`'s cut (the runs': kernel.BASIS_TOLERANCE): the singular vectors above
    sigma_1 * tolerance are kept, every vector is then within sigma_{r+1} of the span; 0 (or a
    tolerance below numpy's) keeps numpy's rank, bit for bit."""
    g = torch.Generator().manual_seed(16)
    left, _ = torch.linalg.qr(torch.randn(80, 30, generator=g, dtype=torch.float64))
    right, _ = torch.linalg.qr(torch.randn(40, 30, generator=g, dtype=torch.float64))
    singular = 10.0 ** -torch.arange(30, dtype=torch.float64) * 0.5  # 0.5, 0.05, ..., 5e-30
    vectors = (left * singular) @ right.T  # [80, 40], rank 30, a known spectrum
    numpy_rank = int(np.linalg.matrix_rank(vectors.numpy()))
    exact_basis, exact_coefficients = numerical_basis(vectors, 0.0)
    assert exact_basis.shape[1] == numpy_rank
    for tolerance in (1e-16, 1e-300):  # at or below numpy's cut: numpy's basis, the same bits
        basis, coefficients = numerical_basis(vectors, tolerance)
        assert torch.equal(basis, exact_basis) and torch.equal(coefficients, exact_coefficients)
    for tolerance, rank in ((3e-12, 12), (3e-7, 7)):  # sigma_k / sigma_1 = 10^-(k-1) > tolerance
        basis, coefficients = numerical_basis(vectors, tolerance)
        assert basis.shape == (40, rank) and coefficients.shape == (80, rank)
        residual = vectors - coefficients @ basis.T
        assert float(torch.linalg.matrix_norm(residual, 2)) <= 1.01 * float(singular[rank])


def test_an_attempt_stopped_by_the_iteration_limit_is_not_retried_as_botorch_does(monkeypatch) -> None:
    """BoTorch's fit counts L-BFGS-B's iteration / evaluation limit (status 1) as a success and
    retries only other failures (e.g. an abnormal line search, status 2)."""
    import wdrbo_dist.models.fit as fit
    from wdrbo_dist.models.lbfgsb import Minimum

    g = torch.Generator().manual_seed(0)
    x = torch.rand(8, 2, generator=g, dtype=torch.float64)
    y = torch.sin(6 * x[:, 0]) + x[:, 1]
    for status, attempts in ((1, 1), (2, fit.MAX_FIT_ATTEMPTS)):
        def stopped(objective, x0, lower, upper, _status=status):
            value, _ = objective(x0)
            return Minimum(x=x0, fun=value, status=_status, nfev=1, nit=0)

        monkeypatch.setattr(fit, "minimize_lbfgsb", stopped)
        _, report = fit.fit_gp(x, y, torch.Generator().manual_seed(1), PAIRS)
        assert report.attempts == attempts
        assert report.converged == (status == 1)


def _cholesky_ucb(model: GaussianProcess, cand: torch.Tensor, contexts: torch.Tensor) -> torch.Tensor:
    b, m = cand.shape[0], contexts.shape[0]
    pairs = torch.cat([cand.unsqueeze(1).expand(b, m, -1), contexts.expand(b, m, -1)], -1)
    return model.ucb(pairs, 1.5)


def test_a_region_basis_spans_the_context_vectors_of_its_whole_box() -> None:
    """Contexts drawn anywhere in the box project onto the grid's basis exactly (to rounding),
    contexts outside it do not, and the route is off without `context_basis`."""
    x, y = _data(60, 3, seed=16)
    pairs_model, _ = fit_gp(x, y, torch.Generator().manual_seed(0), PAIRS)
    box = torch.tensor([[0.7], [0.2]], dtype=torch.float64)  # bounds in either order
    assert pairs_model.region_basis(box) is None
    model = _on_basis(pairs_model)
    region = model.region_basis(box)
    assert region is not None and region.basis.shape[1] < 30 and REGION_RESIDUAL_MAX <= region.residual_max < 1e-8
    basis = region.basis
    assert torch.allclose(basis.T @ basis, torch.eye(basis.shape[1], dtype=torch.float64), atol=1e-12)
    inside = 0.2 + 0.5 * torch.rand(500, 1, generator=torch.Generator().manual_seed(17), dtype=torch.float64)
    vectors = rbf(inside, model.train_x[:, 2:], model.lengthscale[2:])
    found = projected(vectors, region)
    assert found is not None and float((vectors - found[1] @ basis.T).abs().max()) <= region.residual_max
    outside = torch.tensor([[0.95]], dtype=torch.float64)
    assert projected(rbf(outside, model.train_x[:, 2:], model.lengthscale[2:]), region) is None
    cand = torch.rand(4, 2, generator=torch.Generator().manual_seed(18), dtype=torch.float64)
    assert model.ucb_in_region(cand, outside, region, 1.5) is None
    # two context dimensions on a wide box: the grid would exceed REGION_GRID_MAX points
    x2, y2 = _data(60, 4, seed=19)
    wide = _on_basis(fit_gp(x2, y2, torch.Generator().manual_seed(0), PAIRS)[0])
    small = wide.lengthscale[2:].min().item()
    assert wide.region_basis(torch.tensor([[0.0, 0.0], [400 * small, 400 * small]], dtype=torch.float64)) is None


def test_a_region_basis_cut_at_the_tolerance_checks_projections_against_its_own_grid() -> None:
    """The region's basis is cut as a fixed context set's is (kernel.BASIS_TOLERANCE); its
    projection check then allows REGION_RESIDUAL_FACTOR times the grid's own residual: contexts
    inside the box pass it (their vectors lie as near the span as the grid's), contexts
    beyond it do not, and the UCB moves by far less than the noise floor's sd (0.01)."""
    x, y = _data(80, 4, seed=22)
    fitted, _ = fit_gp(x, y, torch.Generator().manual_seed(0), PAIRS)
    box = torch.tensor([[0.1, 0.1], [0.9, 0.9]], dtype=torch.float64)
    cut_model = _on_basis(fitted)
    cut = cut_model.region_basis(box)
    assert cut is not None
    assert REGION_RESIDUAL_MAX < cut.residual_max < 1e-6  # the cut leaves more than numpy's rank would
    g = torch.Generator().manual_seed(23)
    inside = 0.1 + 0.8 * torch.rand(1000, 2, generator=g, dtype=torch.float64)
    inside_vectors = rbf(inside, fitted.train_x[:, 2:], fitted.lengthscale[2:])
    assert projected(inside_vectors, cut) is not None
    assert cut.basis.shape[1] <= numerical_basis(inside_vectors, 0.0)[0].shape[1] - 5  # numpy's rank, inside alone
    beyond = 1.0 + 0.3 * torch.rand(50, 2, generator=g, dtype=torch.float64)
    assert projected(rbf(beyond, fitted.train_x[:, 2:], fitted.lengthscale[2:]), cut) is None
    cand = torch.rand(4, 2, generator=g, dtype=torch.float64)
    features = cut_model.context_features(inside, region=cut)
    assert features.basis is not None and features.basis.shape[1] == cut.basis.shape[1]
    values = cut_model.ucb_from_features(cand, features, 1.5)[0]
    assert 0 < float((values - _cholesky_ucb(fitted, cand, inside)).abs().max()) < 1e-6


@pytest.mark.parametrize("batch", [5, 200])
def test_fresh_contexts_on_the_region_basis_give_the_direct_values_and_gradients(batch: int) -> None:
    """FreshContextUCB with its box on the basis route (the small-batch forms and, above
    DIRECT_MAX_BATCH, the projected features): the Cholesky solve's UCB and gradient in x to
    the basis's cut (the UCB within 1e-7, far inside the noise's sd), and to rounding without
    a basis."""
    from wdrbo_dist.acquisition.fresh_contexts import DIRECT_MAX_BATCH, FreshContextUCB

    assert 5 < DIRECT_MAX_BATCH < 200  # both routes
    x, y = _data(80, 3, seed=20)
    pairs_model, _ = fit_gp(x, y, torch.Generator().manual_seed(0), PAIRS)
    box = torch.tensor([[0.1], [0.9]], dtype=torch.float64)
    g = torch.Generator().manual_seed(21)
    contexts = 0.1 + 0.8 * torch.rand(300, 1, generator=g, dtype=torch.float64)
    cand = torch.rand(batch, 2, generator=g, dtype=torch.float64)
    z = cand.clone().requires_grad_(True)
    exact = _cholesky_ucb(pairs_model, z, contexts)
    (exact_dx,) = torch.autograd.grad(exact.sum(), z)
    errors = {}
    for model in (pairs_model, _on_basis(pairs_model)):
        fresh = FreshContextUCB(model, 1.5, box)
        assert (fresh.region is not None) == model.context_basis
        c = cand.clone().requires_grad_(True)
        ucb = fresh(c, contexts)
        (dx,) = torch.autograd.grad(ucb.sum(), c)
        errors[model.context_basis] = (float((ucb - exact).abs().max()),
                                       float((dx - exact_dx).abs().max()) / float(exact_dx.abs().max()))
    assert errors[True][0] < 1e-7 and errors[True][1] < 1e-8, errors
    assert errors[False][0] < 1e-10 and errors[False][1] < 1e-10, errors


def test_quadratic_forms_have_the_batched_products_values_and_a_closed_form_gradient() -> None:
    """`quadratic_forms`: the values of the batched product [b, n, n] and the x-gradient autograd
    takes through it (written out here), to rounding; torch's gradcheck agrees."""
    x, y = _data(30, 4, seed=30)
    model, _ = fit_gp(x, y, torch.Generator().manual_seed(0), PAIRS)
    g = torch.Generator().manual_seed(31)
    k_x = torch.rand(7, 30, generator=g, dtype=torch.float64)
    k_c = torch.rand(50, 30, generator=g, dtype=torch.float64)
    weights = torch.randn(7, 50, generator=g, dtype=torch.float64)
    results = []
    for closed_form in (True, False):
        kx = k_x.clone().requires_grad_(True)
        if closed_form:
            q = model.quadratic_forms(kx, k_c)
        else:  # kc_N^T diag(kx_b) K^{-1} diag(kx_b) kc_N, autograd through the [b, N, n] product
            q = ((k_c @ (kx.unsqueeze(-1) * model.inverse * kx.unsqueeze(-2))) * k_c).sum(-1)
        (d_kx,) = torch.autograd.grad((q * weights).sum(), kx)
        results.append((q.detach(), d_kx))
    for closed, autograd in zip(*results):
        assert torch.allclose(closed, autograd, rtol=1e-12, atol=1e-12)
    with torch.no_grad():  # without a gradient: the batched product itself
        assert torch.allclose(model.quadratic_forms(k_x, k_c), results[1][0], rtol=1e-12, atol=1e-12)
    small = k_x[:3, :].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda kx: model.quadratic_forms(kx, k_c[:5]), (small,))
    with pytest.raises(ValueError, match="k_x only"):
        model.quadratic_forms(small, k_c[:5].clone().requires_grad_(True))


def _on_pairs_only(monkeypatch: pytest.MonkeyPatch, pairs_only: bool) -> None:
    """Every call of `ucb_from_features` off the basis takes the pair products (the screening
    pass's route) with `pairs_only`, else the forms wherever they serve."""
    from wdrbo_dist.models import pair_routes

    monkeypatch.setattr(pair_routes, "FORMS_MAX_BATCH", 0 if pairs_only else FORMS_MAX_BATCH)


@pytest.mark.parametrize("candidates", [10, 300])
def test_the_forms_route_gives_the_pairs_values_and_gradients_from_min_points_on(
        candidates: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ucb_from_features` takes the quadratic forms for a few candidates (an Adam step) once the
    data have FORMS_MIN_POINTS points, and the pairs otherwise (the screening pass): the same
    UCB and x-gradient as the pairs route, to rounding."""
    g = torch.Generator().manual_seed(33)
    contexts = torch.rand(120, 2, generator=g, dtype=torch.float64)
    cand = torch.rand(candidates, 2, generator=g, dtype=torch.float64)
    for n in (FORMS_MIN_POINTS - 1, FORMS_MIN_POINTS + 12):
        x, y = _data(n, 4, seed=32)
        model, _ = fit_gp(x, y, torch.Generator().manual_seed(0), PAIRS)
        features = model.context_features(contexts)
        results = {}
        for pairs_only in (True, False):
            _on_pairs_only(monkeypatch, pairs_only)
            c = cand.clone().requires_grad_(True)
            ucb, _ = model.ucb_from_features(c, features, 1.5)
            (dx,) = torch.autograd.grad(ucb.sum(), c)
            results[pairs_only] = (ucb.detach(), dx)
            taken = model._forms_route(candidates, features)
            assert taken == (not pairs_only and candidates <= FORMS_MAX_BATCH and n >= FORMS_MIN_POINTS)
        for forms, pairs in zip(results[False], results[True]):
            assert torch.allclose(forms, pairs, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("dim_c", [1, 2])
def test_the_forms_route_carries_context_gradients_taken_outside_autograd(
        dim_c: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """WDRBO's Adam step (context gradients detached, a few candidates, n >= FORMS_MIN_POINTS)
    takes the quadratic forms with its gradient columns too: the UCB, the x-gradient of the
    values and the context gradients of the pairs route, to rounding, each no further from a
    Cholesky solve per pair than the pairs'. Where an x-gradient is to be taken through the
    context gradients, the pairs route is kept."""
    x, y = _data(FORMS_MIN_POINTS + 12, 2 + dim_c, seed=34)
    model, _ = fit_gp(x, y, torch.Generator().manual_seed(0), PAIRS)
    g = torch.Generator().manual_seed(35)
    contexts = torch.rand(40, dim_c, generator=g, dtype=torch.float64)
    points = torch.rand(30, dim_c, generator=g, dtype=torch.float64)
    cand = torch.rand(10, 2, generator=g, dtype=torch.float64)
    grad_pairs = torch.cat([cand.unsqueeze(1).expand(-1, 30, -1), points.expand(10, -1, -1)], -1)
    _, direct_grad = model.ucb_and_gradient(grad_pairs, 1.5, slice(2, None))
    features = model.context_features(contexts, points)
    results, errors = {}, {}
    for pairs_only in (True, False):
        _on_pairs_only(monkeypatch, pairs_only)
        assert model._forms_route(10, features, gradient_outside_autograd=True) is not pairs_only
        assert not model._forms_route(10, features, gradient_outside_autograd=False)
        c = cand.clone().requires_grad_(True)
        ucb, grad = model.ucb_from_features(c, features, 1.5, detach_gradient=True)
        (dx,) = torch.autograd.grad(ucb.sum(), c)
        with torch.no_grad():
            ucb_no_grad, grad_no_grad = model.ucb_from_features(cand, features, 1.5)
        assert torch.allclose(grad_no_grad, grad, rtol=1e-9, atol=1e-9)
        assert torch.allclose(ucb_no_grad, ucb.detach(), rtol=1e-9, atol=1e-9)
        results[pairs_only] = (ucb.detach(), grad, dx)
        errors[pairs_only] = float((grad - direct_grad).abs().max())
    for forms, pairs in zip(results[False], results[True]):
        assert torch.allclose(forms, pairs, rtol=1e-9, atol=1e-9)
    assert errors[False] <= max(2 * errors[True], 1e-12), errors


@pytest.mark.parametrize("basis", [False, True])
def test_values_without_autograd_are_the_autograd_routes_to_the_bit(basis: bool, monkeypatch) -> None:
    """The screening pass (no autograd, no context gradients) takes the compiled elementwise
    tail: the same UCB values, bit for bit, as the differentiable route, chunk by chunk, on the
    pairs route and on the basis route."""
    x, y = _data(60, 3, seed=21)
    model, _ = fit_gp(x, y, torch.Generator().manual_seed(0), PAIRS)
    if basis:
        model = _on_basis(model)
    contexts = torch.rand(300, 1, generator=torch.Generator().manual_seed(22), dtype=torch.float64)
    features = model.context_features(contexts)
    assert (features.basis is not None) is basis
    cand = torch.rand(200, 2, generator=torch.Generator().manual_seed(23), dtype=torch.float64)  # several chunks
    compiled_calls = []
    compiled = GaussianProcess._ucb_without_gradient
    monkeypatch.setattr(GaussianProcess, "_ucb_without_gradient",
                        lambda *args: compiled_calls.append(1) or compiled(*args))
    with torch.no_grad():
        fused, _ = model.ucb_from_features(cand, features, 1.5)
    differentiable, _ = model.ucb_from_features(cand.clone().requires_grad_(True), features, 1.5)
    assert compiled_calls == [1]  # the no-autograd call took the compiled passes, the other did not
    assert differentiable.requires_grad and not fused.requires_grad
    assert torch.equal(fused, differentiable.detach())


@pytest.mark.parametrize(("m", "n", "dim"), [(1024, 1024, 1), (1000, 37, 1), (300, 99, 3), (5, 1, 2)])
def test_rbf_without_autograd_has_the_bits_of_its_differentiable_arithmetic(m: int, n: int, dim: int) -> None:
    generator = torch.Generator().manual_seed(m + n)
    a = torch.rand(3, m, dim, generator=generator, dtype=torch.float64) * 4 - 2
    b = torch.rand(n, dim, generator=generator, dtype=torch.float64) * 4 - 2
    lengthscale = torch.rand(dim, generator=generator, dtype=torch.float64) + 0.05
    differentiable = rbf(a.clone().requires_grad_(), b, lengthscale)
    assert differentiable.requires_grad
    assert torch.equal(rbf(a, b, lengthscale), differentiable.detach())
