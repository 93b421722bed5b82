"""The compiled Adam step (NumericalSettings.adam_pass, models/compiled_ucb.py and compiled_pairs.py) of the acquisitions that
are a weighted mean UCB over fixed contexts, minus eps L(x) in WDRBO (ERBO, WDRBO, SBO-KDE), and
of those that are another function of the UCB at every (candidate, context) pair (DRBO-KDE,
DRBO-MMD and its minimax, StableOpt's minimum over fresh contexts). It computes torch's values and
gradients to rounding, on the basis route and on V = I."""

from __future__ import annotations

from dataclasses import fields

import numpy as np
import pytest
import torch

from tests.support.routes import PAIRS, with_routes
from wdrbo_dist.acquisition.drbo_kde import DRBOKDE
from wdrbo_dist.acquisition.drbo_mmd import DRBOMMD
from wdrbo_dist.acquisition.fresh_contexts import FreshContextUCB
from wdrbo_dist.acquisition.mmd_minimax import DRBOMMDMinimax, minimax_value, minimax_value_and_weights
from wdrbo_dist.acquisition.optimize import OptimizerSettings, adam_ascent
from wdrbo_dist.acquisition.compiled import FixedContextUCB
from wdrbo_dist.acquisition.sbo_kde import SBOKDE, SampleAverageUCB
from wdrbo_dist.acquisition.stableopt import StableOpt
from wdrbo_dist.acquisition.ucb import GPUCB
from wdrbo_dist.models.fit import fit_gp
from wdrbo_dist.problems import make_problem
from wdrbo_dist.acquisition.wdrbo import ERBO, WDRBO
from wdrbo_dist.models.compiled_pairs import CompiledPairs
from wdrbo_dist.models.compiled_ucb import CompiledUCB
from wdrbo_dist.models.settings import NumericalSettings

from test_wdrbo import _state_and_model


ROUTES = {field.name for field in fields(NumericalSettings)}


def _paper_acquisitions(problem_name: str, n: int, variants: list[dict], algorithm=WDRBO, context_basis: bool = False):
    """One paper-profile acquisition per variant: its routes (NumericalSettings fields) on the
    model's settings, the rest as algorithm options."""
    problem, state, model = _state_and_model(problem_name, n=n)
    acquisitions = []
    for extra in variants:
        routes = {name: value for name, value in extra.items() if name in ROUTES}
        algo = algorithm(problem, "paper", {name: value for name, value in extra.items() if name not in ROUTES})
        algo.setup(state, torch.Generator().manual_seed(1))
        on_routes = with_routes(model, context_basis=context_basis, **routes)
        acquisitions.append(algo.acquisition(on_routes, state, torch.Generator().manual_seed(2)))
    return problem, acquisitions


def _pair_kernel(acquisition):
    """The acquisition's compiled pair kernel, fixed contexts or fresh ones (None: torch's pass)."""
    if hasattr(acquisition, "fresh"):  # DRBO-KDE: its samples' kernel (and its m(x)'s, checked below)
        assert (acquisition.samples_ucb._compiled is None) is (acquisition.fresh._compiled is None)
        return acquisition.samples_ucb._compiled
    if hasattr(acquisition, "grid_ucb"):  # the minimax, DRBO-MMD
        return acquisition.grid_ucb._compiled
    return acquisition.ucb._compiled if hasattr(acquisition, "ucb") else acquisition._compiled


@pytest.mark.parametrize(("algorithm", "problem_name", "n", "identity", "shared"), [
    (WDRBO, "ackley", 40, False, True),  # one context dimension: the vectors' numerical basis (r ~ 25 < n)
    (WDRBO, "ackley", 15, True, True),  # few points: the basis would save nothing, V = I
    (WDRBO, "modified-branin", 40, True, True),  # two context dimensions: V = I
    (ERBO, "ackley", 40, False, True),
    (ERBO, "modified-branin", 40, True, True),
    # the general setting: the centre's quadrature (64 nodes), not the data; torch's pass keeps the pairs
    (ERBO, "toy-general", 30, False, False),
    (SBOKDE, "ackley", 40, False, True),  # 512 KDE samples, equal weights
    (SBOKDE, "modified-branin", 30, True, True),
])
def test_compiled_adam_pass_agrees_with_torch(algorithm, problem_name: str, n: int, identity: bool,
                                              shared: bool) -> None:
    """NumericalSettings.adam_pass: an Adam step's values and gradients agree to rounding, with
    L(x) differentiated or detached, and without autograd, on the basis and on the identity;
    where torch's pass keeps the pair products (not `shared`) and the kernel takes the cut
    basis, to the cut (values within 1e-9)."""
    variants = [{"adam_pass": "compiled"}, {"adam_pass": "torch"}]
    if algorithm is WDRBO:
        variants += [{"adam_pass": "compiled", "wdrbo_L_detached": True}, {"adam_pass": "torch", "wdrbo_L_detached": True}]
    problem, acquisitions = _paper_acquisitions(problem_name, n, variants, algorithm, context_basis=True)
    value_tolerance, gradient_rtol, gradient_atol = (1e-10, 1e-8, 1e-9) if shared else (1e-9, 1e-7, 1e-8)
    compiled, torch_pass = acquisitions[:2]
    assert compiled._compiled is not None and torch_pass._compiled is None  # the route is taken
    assert compiled._compiled.identity is identity
    low, high = problem.decision_bounds
    x = low + (high - low) * torch.rand(10, problem.dim_x, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    for a, b in zip(acquisitions[::2], acquisitions[1::2]):
        xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        value_a, value_b = a(xa), b(xb)
        (grad_a,), (grad_b,) = torch.autograd.grad(value_a.sum(), xa), torch.autograd.grad(value_b.sum(), xb)
        # (to rounding amplified by K^{-1}'s ~1/noise entries and small posterior deviations)
        assert torch.allclose(value_a.detach(), value_b.detach(), rtol=0, atol=value_tolerance)
        assert torch.allclose(grad_a, grad_b, rtol=gradient_rtol, atol=gradient_atol)
        with torch.no_grad():
            assert torch.allclose(a(x), value_a.detach(), rtol=0, atol=1e-15)
    if algorithm is WDRBO:  # detaching L(x) changes the gradient
        assert not torch.allclose(grad_a, torch.autograd.grad(compiled(xa).sum(), xa)[0])
    # The screening pass's many candidates keep torch's pass.
    many = low + (high - low) * torch.rand(40, problem.dim_x, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    with torch.no_grad():
        assert torch.allclose(compiled(many), torch_pass(many), rtol=0, atol=1e-12)


@pytest.mark.parametrize(("algorithm", "problem_name"), [
    (WDRBO, "newsvendor"), (ERBO, "newsvendor"), (WDRBO, "hartmann"), (SBOKDE, "hartmann"),
    (DRBOKDE, "hartmann"), (DRBOMMDMinimax, "hartmann"),  # the pair kernel's backward pass
])
def test_compiled_adam_pass_gradient_matches_finite_differences(algorithm, problem_name: str) -> None:
    """d(value)/dx of the kernels, for a weighted mean (ERBO, WDRBO, SBO-KDE), a sorted-weight
    sum (DRBO-KDE; its m(x), redrawn at every call, held fixed here) and the minimax's closed form."""
    problem, (acq,) = _paper_acquisitions(problem_name, 45, [{"adam_pass": "compiled"}], algorithm)
    assert _pair_kernel(acq) is not None
    low, high = problem.decision_bounds
    x = low + (high - low) * torch.rand(4, problem.dim_x, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    if algorithm is DRBOKDE:
        with torch.no_grad():
            fixed_minimum = acq.minimum(x)
        acq.minimum = lambda points: fixed_minimum
    xr = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(acq(xr).sum(), xr)
    h = 1e-6 * float((high - low).max())
    numeric = torch.zeros_like(x)
    for k in range(problem.dim_x):
        step = torch.zeros_like(x)
        step[:, k] = h
        with torch.no_grad():
            numeric[:, k] = (acq(x + step) - acq(x - step)) / (2 * h)
    assert torch.allclose(grad, numeric, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(("problem_name", "n"), [("ackley", 40), ("hartmann", 60), ("portfolio-uniform", 25)])
def test_gp_ucbs_kernel_gives_torchs_posterior_ucb_and_autograds_gradient_to_rounding(problem_name: str, n: int) -> None:
    """GP-UCB (a GP on x alone): the kernel's values and closed-form gradients against torch's
    posterior (a triangular solve) and autograd, an Adam step's batch through the kernel and the
    screening pass's through torch; the gradient against central differences."""
    problem = make_problem(problem_name)
    generator = torch.Generator().manual_seed(0)
    x = torch.rand(n, problem.dim_x, generator=generator, dtype=torch.float64)
    model, _ = fit_gp(x, problem.observe(x, generator).y, generator, PAIRS)
    variants = [GPUCB(problem, "paper").acquisition(with_routes(model, adam_pass=route), None, generator)
                for route in ("compiled", "torch")]
    compiled, torch_pass = variants
    assert compiled._compiled is not None and torch_pass._compiled is None
    candidates = torch.rand(10, problem.dim_x, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    xa, xb = candidates.clone().requires_grad_(True), candidates.clone().requires_grad_(True)
    value_a, value_b = compiled(xa), torch_pass(xb)
    (grad_a,), (grad_b,) = torch.autograd.grad(value_a.sum(), xa), torch.autograd.grad(value_b.sum(), xb)
    assert torch.allclose(value_a.detach(), value_b.detach(), rtol=0, atol=1e-10)
    assert torch.allclose(grad_a, grad_b, rtol=1e-8, atol=1e-8)
    value, gradient = compiled.value_and_gradient(candidates)  # Adam's route: no autograd
    assert torch.equal(value, value_a.detach()) and torch.equal(gradient, grad_a)
    h = 1e-6
    for k in range(problem.dim_x):
        step = torch.zeros_like(candidates)
        step[:, k] = h
        with torch.no_grad():
            numeric = (compiled(candidates + step) - compiled(candidates - step)) / (2 * h)
        assert torch.allclose(gradient[:, k], numeric, rtol=1e-4, atol=1e-6)
    many = torch.rand(40, problem.dim_x, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    with torch.no_grad():
        assert compiled.value_and_gradient(many) is None
        assert torch.equal(compiled(many), torch_pass(many))  # the screening pass keeps torch's posterior


def test_compiled_adam_pass_is_the_cpus_route_and_falls_back_where_it_cannot_serve() -> None:
    assert NumericalSettings.for_run("cpu").adam_pass == "compiled"
    assert NumericalSettings.for_run("cuda").adam_pass == "torch"
    for algorithm in (WDRBO, ERBO, GPUCB, SBOKDE, DRBOKDE, DRBOMMD, DRBOMMDMinimax, StableOpt):
        assert "adam_pass" not in algorithm.declared_options()
    # The autograd x-gradient of L(x) keeps torch's pass.
    _, (autograd,) = _paper_acquisitions("ackley", 40, [{"wdrbo_L_gradient": "autograd"}])
    assert autograd._compiled is None
    # The kernel is float64 on the CPU; other tensors (a GPU's, say) keep torch's pass.
    model, nodes, weights, points = autograd.model, autograd.nodes, autograd.weights, autograd.lipschitz_points
    assert CompiledUCB.build(model, nodes, weights, points, 1.5) is not None
    assert CompiledUCB.build(model, nodes, weights, points.float(), 1.5) is None
    assert CompiledPairs.build(model, nodes.float(), 1.5) is None


def _same_arguments(shared, own) -> None:
    assert shared is not None and own is not None and shared.identity is own.identity
    assert len(shared.arguments) == len(own.arguments)
    for mine, theirs in zip(shared.arguments, own.arguments):
        if isinstance(mine, (bool, float)):
            assert mine == theirs
        else:
            assert mine.shape == theirs.shape and mine.tobytes() == theirs.tobytes()


@pytest.mark.parametrize(("algorithm", "problem_name", "n"), [
    (WDRBO, "ackley", 40), (WDRBO, "ackley", 15), (WDRBO, "modified-branin", 40), (ERBO, "ackley", 40),
])
def test_a_kernel_built_from_the_acquisitions_features_has_the_arguments_of_its_own_build(
        algorithm, problem_name: str, n: int) -> None:
    """The kernels reuse the context features' vectors and SVD (`ContextFeatures.span`, whether
    or not torch's route took the basis) rather than compute them again: every argument is the
    same to the bit as that of a kernel that builds them itself."""
    _, (acq,) = _paper_acquisitions(problem_name, n, [{"adam_pass": "compiled"}], algorithm, context_basis=True)
    points = acq.lipschitz_points if acq.radius > 0 else None
    own = CompiledUCB.build(acq.model, acq.nodes, acq.weights, points, acq.beta,
                            radius=acq.radius, detach_lipschitz=acq.detach_lipschitz)
    _same_arguments(acq._compiled, own)


@pytest.mark.parametrize("problem_name", ["ackley", "modified-branin"])
def test_the_sample_kernels_built_from_their_features_have_the_arguments_of_their_own_build(problem_name: str) -> None:
    """SBO-KDE's mean kernel and the pair kernel of fixed contexts (DRBO-KDE's samples, the MMD
    grids), from features whose basis route was or was not taken."""
    problem, state, model = _state_and_model(problem_name, n=40)
    model = with_routes(model, context_basis=True)
    contexts = torch.rand(512, problem.dim_c, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    weights = contexts.new_full((512,), 1.0 / 512)
    sample_average = SampleAverageUCB(model, contexts, 1.5, compiled=True)
    assert sample_average.features.span is not None
    _same_arguments(sample_average._compiled, CompiledUCB.build(model, contexts, weights, None, 1.5))
    fixed = FixedContextUCB(model, contexts, 1.5, compiled=True)
    _same_arguments(fixed._compiled, CompiledPairs.build(model, contexts, 1.5))


@pytest.mark.parametrize(("algorithm", "problem_name", "n", "identity"), [
    (DRBOKDE, "ackley", 40, False),  # 1024 KDE samples, one context dimension: their basis
    (DRBOKDE, "modified-branin", 30, True),  # two context dimensions: V = I
    (DRBOMMDMinimax, "ackley", 40, False),  # the 1024-point grid
    (DRBOMMDMinimax, "modified-branin", 30, True),
    (DRBOMMD, "ackley", 40, False),  # the 100-point grid, the worst case p* solved for each u row
    (DRBOMMD, "modified-branin", 30, True),
    (StableOpt, "ackley", 40, None),  # fresh Sobol contexts at every call: the box's region basis
    (StableOpt, "modified-branin", 30, None),  # (or V = I where the region's basis is too large)
])
def test_compiled_pairs_agree_with_torch(algorithm, problem_name: str, n: int, identity: bool | None) -> None:
    """The same values and x-gradients as torch's pass, call after call (the acquisitions that
    redraw contexts draw the same ones from equally seeded generators). StableOpt's fresh
    contexts take the box's cut basis or the direct forms, each pass by its own cost rule:
    the same to the cut (values within 1e-9)."""
    problem, (compiled, torch_pass) = _paper_acquisitions(problem_name, n, [{"adam_pass": "compiled"},
                                                                             {"adam_pass": "torch"}], algorithm,
                                                          context_basis=True)
    assert _pair_kernel(compiled) is not None and _pair_kernel(torch_pass) is None
    if identity is not None:
        assert _pair_kernel(compiled).identity is identity
    value_tolerance, gradient_rtol, gradient_atol = (1e-9, 1e-7, 1e-8) if algorithm is StableOpt else (1e-10, 1e-8, 1e-9)
    low, high = problem.decision_bounds
    generator = torch.Generator().manual_seed(8)
    for _ in range(3):
        x = low + (high - low) * torch.rand(10, problem.dim_x, generator=generator, dtype=torch.float64)
        xa, xb = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        value_a, value_b = compiled(xa), torch_pass(xb)
        (grad_a,), (grad_b,) = torch.autograd.grad(value_a.sum(), xa), torch.autograd.grad(value_b.sum(), xb)
        assert torch.allclose(value_a.detach(), value_b.detach(), rtol=0, atol=value_tolerance)
        assert torch.allclose(grad_a, grad_b, rtol=gradient_rtol, atol=gradient_atol)
        assert grad_a.abs().max() > 0
    many = low + (high - low) * torch.rand(40, problem.dim_x, generator=generator, dtype=torch.float64)
    with torch.no_grad():  # the screening pass's many candidates keep torch's pass
        assert torch.allclose(compiled(many), torch_pass(many), rtol=0, atol=1e-12)


def _fixed_features(acquisition):
    """The GP's context features of the acquisition's fixed contexts (KDE samples or grid)."""
    for name in ("samples_ucb", "grid_ucb"):  # DRBO-KDE, the minimax
        if hasattr(acquisition, name):
            return getattr(acquisition, name).features
    return acquisition.features  # SBO-KDE


@pytest.mark.parametrize("algorithm", [SBOKDE, DRBOKDE, DRBOMMDMinimax])
def test_the_cut_basis_on_two_context_dimensions_moves_values_and_gradients_by_rounding_only(algorithm) -> None:
    """The basis's cut (kernel.BASIS_TOLERANCE): on two context dimensions at n = 99 numpy's rank
    keeps ~70 of 99 vectors; the cut keeps 15 or more fewer, and the kernels' values and
    x-gradients are those of torch's pass on the pair products (no basis) to 1e-6 (their
    scale: ~1; the variances move by ~5e-8)."""
    problem, state, fitted = _state_and_model("modified-branin", n=99)
    values = []
    x = torch.rand(10, problem.dim_x, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    for routes in ({"context_basis": True, "adam_pass": "compiled"}, {"context_basis": False, "adam_pass": "torch"}):
        algo = algorithm(problem, "paper")
        algo.setup(state, torch.Generator().manual_seed(1))
        acquisition = algo.acquisition(with_routes(fitted, **routes), state, torch.Generator().manual_seed(2))
        kernel = _pair_kernel(acquisition)
        if routes["adam_pass"] == "compiled":
            numpy_rank = int(np.linalg.matrix_rank(_fixed_features(acquisition).mean.T.numpy()))
            assert not kernel.identity and kernel.arguments[6].shape[1] <= numpy_rank - 15  # V [n, r]
        else:
            assert kernel is None
        xa = x.clone().requires_grad_(True)
        value = acquisition(xa)
        (grad,) = torch.autograd.grad(value.sum(), xa)
        values.append((value.detach(), grad))
    (value_cut, grad_cut), (value_pairs, grad_pairs) = values
    assert 0 < float((value_cut - value_pairs).abs().max()) < 1e-6
    assert torch.allclose(grad_cut, grad_pairs, rtol=0, atol=1e-6)


def test_compiled_fresh_pairs_take_the_region_basis_only_where_it_spans_the_contexts() -> None:
    """Contexts outside the box its region basis was built for are not in its span (to ~1e-10
    here): the kernel then takes V = I, and the values stay torch's to ~1e-14 (the region's
    projection would part from them by ~1e-11)."""
    problem, state, model = _state_and_model("ackley", n=40)
    model = with_routes(model, context_basis=True)
    box = problem.context_bounds.to(torch.float64)
    compiled, torch_pass = FreshContextUCB(model, 1.5, box, compiled=True), FreshContextUCB(model, 1.5, box)
    assert compiled._compiled is not None and compiled._compiled.region is not None
    x = torch.rand(6, problem.dim_x, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    width = box[1] - box[0]
    for contexts in (box[0] + width * torch.rand(1024, 1, dtype=torch.float64),  # inside: the region basis
                     box[1] + width * torch.rand(1024, 1, dtype=torch.float64)):  # outside: V = I
        assert torch.allclose(compiled(x, contexts), torch_pass(x, contexts), rtol=0, atol=1e-12)


def test_the_minimax_backward_pass_over_nonzero_weights_gives_the_dense_gradient() -> None:
    """The minimax's compiled pass: d(value)/du is zero off w's support and the minimisers (most
    of the grid), so the backward pass leaves those grid points out: the same gradient to
    rounding as the backward pass over every grid point (DRBO-KDE's and DRBO-MMD's)."""
    problem, (sparse,) = _paper_acquisitions("ackley", 45, [{"adam_pass": "compiled"}], DRBOMMDMinimax,
                                             context_basis=True)
    assert _pair_kernel(sparse).sparse_backward
    assert int((sparse.w > 0).sum()) < sparse.w.numel() // 10
    low, high = problem.decision_bounds
    x = low + (high - low) * torch.rand(10, problem.dim_x, generator=torch.Generator().manual_seed(9), dtype=torch.float64)

    def gradient() -> torch.Tensor:
        xr = x.clone().requires_grad_(True)
        return torch.autograd.grad(sparse(xr).sum(), xr)[0]

    sparse_gradient = gradient()
    grid = DRBOMMDMinimax(problem, "paper").grid().to(torch.float64)
    sparse.grid_ucb = FixedContextUCB(sparse.model, grid, sparse.beta, compiled=True)  # the dense pass
    assert not _pair_kernel(sparse).sparse_backward
    assert sparse_gradient.abs().max() > 0
    assert torch.allclose(sparse_gradient, gradient(), rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("project_parameter", [True, False])
@pytest.mark.parametrize(("algorithm", "problem_name", "options"), [
    (ERBO, "ackley", {}), (WDRBO, "ackley", {}), (WDRBO, "newsvendor", {"wdrbo_L_detached": True}),
    (SBOKDE, "modified-branin", {}), (DRBOMMD, "ackley", {}), (DRBOMMD, "modified-branin", {}),
    (DRBOMMDMinimax, "ackley", {}), (DRBOMMDMinimax, "modified-branin", {}),
])
def test_adam_takes_the_kernels_gradient_without_autograd_and_gets_autograds_steps_to_the_bit(
        algorithm, problem_name: str, options: dict, project_parameter: bool) -> None:
    """`value_and_gradient`: where an Adam step is one compiled call (DRBO-MMD's: the pair kernel's
    backward pass with its worst cases p* as weights), Adam skips autograd; the end points,
    values and step count are those of autograd through `forward`."""
    problem, (acq,) = _paper_acquisitions(problem_name, 40, [{"adam_pass": "compiled"} | options], algorithm)
    taken = []
    direct = acq.value_and_gradient
    acq.value_and_gradient = lambda x: taken.append(x.shape[0]) or direct(x)
    low, high = problem.decision_bounds
    starts = low + (high - low) * torch.rand(6, problem.dim_x, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    settings = OptimizerSettings(num_restarts=6, raw_samples=6, batch_limit=6, project_parameter=project_parameter)
    bounds = torch.stack([low, high]).to(torch.float64)
    x, values, steps = adam_ascent(acq, starts, bounds, settings)
    assert taken == [6] * steps and steps > 5  # every step took the kernel's gradient
    x_autograd, values_autograd, steps_autograd = adam_ascent(lambda x: acq(x), starts, bounds, settings)
    assert torch.equal(x, x_autograd) and torch.equal(values, values_autograd) and steps == steps_autograd
    # Batches beyond the compiled pass's (the screening pass) have no closed-form route.
    assert direct(starts.repeat(3, 1)) is None


@pytest.mark.parametrize(("algorithm", "problem_name"), [
    (DRBOKDE, "ackley"), (DRBOKDE, "modified-branin"), (StableOpt, "ackley"), (StableOpt, "modified-branin"),
])
def test_adam_steps_with_fresh_draws_skip_autograd_and_get_autograds_steps_to_the_bit(algorithm, problem_name: str) -> None:
    """DRBO-KDE's closed form with m(x) detached (autograd's backward pass through the
    sorted-weight sum written out: the mean's 1/N, the penalty's -w_k/N where u_(k) >= m(x),
    into the pair kernel's) and StableOpt's minimum over fresh contexts (the kernel's backward
    pass with one weight per candidate): `value_and_gradient` gives the Adam steps of autograd
    through `forward` to the bit, the Sobol draws of every call included (the generator is reset
    before each ascent)."""
    problem, (acq,) = _paper_acquisitions(problem_name, 40, [{"adam_pass": "compiled"}], algorithm)
    low, high = problem.decision_bounds
    restarts = 5 if algorithm is DRBOKDE else 10
    starts = low + (high - low) * torch.rand(restarts, problem.dim_x, generator=torch.Generator().manual_seed(3),
                                             dtype=torch.float64)
    if algorithm is DRBOKDE:
        with torch.no_grad():
            acq.generator = torch.Generator().manual_seed(4)
            u, m = acq.samples_ucb(starts), acq.minimum(starts)
            _, _, passes = acq._closed_form(u, m)
        assert passes.any() and acq._sorted_weights[-1] % 1.0 != 0.0  # the penalty's gradient, a fractional weight
    settings = OptimizerSettings(num_restarts=restarts, raw_samples=restarts, batch_limit=restarts)
    bounds = torch.stack([low, high]).to(torch.float64)
    taken = []
    direct = acq.value_and_gradient
    acq.value_and_gradient = lambda x: taken.append(x.shape[0]) or direct(x)
    acq.generator = torch.Generator().manual_seed(5)
    x, values, steps = adam_ascent(acq, starts, bounds, settings)
    assert taken == [restarts] * steps and steps > 5
    acq.generator = torch.Generator().manual_seed(5)
    x_autograd, values_autograd, steps_autograd = adam_ascent(lambda x: acq(x), starts, bounds, settings)
    assert torch.equal(x, x_autograd) and torch.equal(values, values_autograd) and steps == steps_autograd
    assert direct(starts.repeat(4, 1)) is None  # the screening pass's batches keep torch's route
    # The routes that keep autograd: m(x) differentiated; torch's pass (another device's), whose
    # StableOpt recomputes the posterior at the minimisers.
    other = {"drbokde_min_detached": False} if algorithm is DRBOKDE else {"adam_pass": "torch"}
    _, (kept,) = _paper_acquisitions(problem_name, 40, [{"adam_pass": "compiled"} | other], algorithm)
    assert kept.value_and_gradient(starts) is None


def test_the_minimaxs_written_out_backward_pass_is_autograds_to_the_bit() -> None:
    """`minimax_value_and_weights`: d(value)/du through the closed form, cases 2 and 3, e* = 0
    included, against autograd through `minimax_value` (whose loss hands each value -1: the
    negation, to the bit); case 1 and non-finite values are left to autograd."""
    generator = torch.Generator().manual_seed(0)
    size = 64
    w = torch.rand(size, generator=generator, dtype=torch.float64)
    w /= w.sum()
    mmd_squared = torch.rand(size, generator=generator, dtype=torch.float64) * 0.5
    mmd_squared[:8] = 0.0  # e* = 0 at the first points
    u = torch.randn(40, size, generator=generator, dtype=torch.float64)
    u[:6, 3] = -10.0  # minimisers where e* = 0
    for radius in (0.05, 0.3, 0.9):
        found = minimax_value_and_weights(u, w, mmd_squared, radius)
        assert found is not None
        value, weights = found
        ur = u.clone().requires_grad_(True)
        reference = minimax_value(ur, w, mmd_squared, radius, False, False)
        (grad,) = torch.autograd.grad(-reference.sum(), ur)
        assert torch.equal(value, reference.detach()) and torch.equal(-weights, grad)
        if radius == 0.3:  # both cases among the candidates (case 3: the value is the minimum)
            assert (value == u.min(-1).values).any() and (value != u.min(-1).values).any()
    assert minimax_value_and_weights(u, w, mmd_squared, -1.0) is None  # case 1 (r < eps')
    u[0, 0] = float("inf")
    assert minimax_value_and_weights(u, w, mmd_squared, 0.3) is None
