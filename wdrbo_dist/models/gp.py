"""The GP surrogate of spec 1.4, written for speed on small data.

BoTorch's default `SingleTaskGP` (the reference's): RBF-ARD kernel, unit prior variance,
LogNormal(sqrt(2) + ln(D)/2, sqrt(3)) lengthscale priors (>= 0.025), a LogNormal(-4, 1) noise
prior (>= 1e-4), a constant mean, MAP-fitted by L-BFGS-B on the exact marginal log-likelihood / n,
targets standardised with the unbiased std. Re-implemented in a few dense tensor operations
because a BO step fits it once and queries it tens of thousands of times (the general machinery:
~10x more per step at n <= 100); tests/models/test_gp.py checks it against BoTorch and gpytorch.
Everything is float64 on the training data's device; the posterior is in standardised-y units.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TypeVar

import numpy as np
import torch
import scipy.linalg
from torch import Tensor

from wdrbo_dist.models.lbfgsb import minimize_lbfgsb

LENGTHSCALE_MIN = 0.025
NOISE_MIN = 1e-4
NOISE_PRIOR = (-4.0, 1.0)
FAILED_OBJECTIVE = 1e10  # the MAP objective's value where K is not positive definite or a value is not finite
MAX_FIT_ATTEMPTS = 5
VARIANCE_FLOOR = 1e-12
PAIR_CHUNK = 128  # candidates per block in `ucb_pairs` (keeps the [c, n(n+1)/2] block in cache)
BASIS_CHUNK = 64  # candidates per block on the basis route (keeps the [c, n, r] block in cache)
# `ucb_from_features` without autograd finishes in compiled passes from this many contexts on
# (KDE samples, grids, fresh sets: 0.7-0.9x the time per call); below, torch's passes over small
# arrays cost about the same (timed with `GaussianProcess.compiled_tail` off and on).
COMPILED_TAIL_MIN_CONTEXTS = 256
# `region_basis`: grid spacing in context lengthscales (at 1/8 the projections of fresh contexts
# are exact to ~1e-13 where the box spans several lengthscales; a box under one lengthscale wide
# gets too few points, and its contexts often fail the check), the largest
# grid, and the projection residual above which a context set is not in the basis's span
# (`ucb_in_region` and the compiled kernels then take V = I): REGION_RESIDUAL_MAX for numpy's
# rank; for a basis cut at `region_tolerance`, REGION_RESIDUAL_FACTOR times the grid's own
# largest residual, if larger (contexts inside the box lie within 1-2.5x it, beyond it 100x
# or more, but where a long lengthscale spans both: benchmarks/routes.py region).
REGION_SPACING = 0.125
REGION_GRID_MAX = 4096
REGION_RESIDUAL_MAX = 1e-11
REGION_RESIDUAL_FACTOR = 4.0
REGION_CHUNK = 16  # candidates per block in `ucb_in_region` (a [c, N, r] block)
# `context_forms`: the candidate-side quadratic forms replace the pair products for calls of at
# most FORMS_MAX_BATCH candidates (Adam's restarts, not the screening pass) once the data have
# FORMS_MIN_POINTS points (the crossover measured by benchmarks/routes.py forms-step)
FORMS_MAX_BATCH = 16
FORMS_MIN_POINTS = 48


def lengthscale_prior(dim: int) -> tuple[float, float]:
    """BoTorch's dimension-scaled LogNormal lengthscale prior (loc, scale)."""
    return math.sqrt(2.0) + 0.5 * math.log(dim), math.sqrt(3.0)


def standardize(y: Tensor) -> tuple[Tensor, float, float]:
    """(y - mean) / std with the unbiased std (a constant y gets std 1)."""
    mean = float(y.mean())
    std = float(y.std()) if y.numel() > 1 else 1.0
    if not math.isfinite(std) or std <= 0.0:
        std = 1.0
    return (y - mean) / std, mean, std


def rbf(a: Tensor, b: Tensor, lengthscale: Tensor) -> Tensor:
    """k(a, b) = exp(-0.5 * sum_k (a_k - b_k)^2 / l_k^2) for a [..., m, D], b [n, D] -> [..., m, n]."""
    a_s = a / lengthscale
    b_s = b / lengthscale
    if torch.is_grad_enabled() and (a_s.requires_grad or b_s.requires_grad):
        sq = (a_s * a_s).sum(-1, keepdim=True) - 2.0 * a_s @ b_s.T + (b_s * b_s).sum(-1)
        return torch.exp(-0.5 * sq.clamp_min(0.0))
    # Without autograd, the same operations in place on the product (the same bits, written
    # once instead of five times: context_gram's [1024, 1024] arrays).
    sq = (2.0 * a_s) @ b_s.T
    return sq.neg_().add_((a_s * a_s).sum(-1, keepdim=True)).add_((b_s * b_s).sum(-1)).clamp_min_(0.0).mul_(-0.5).exp_()


@dataclass(frozen=True)
class ContextFeatures:
    """The context-side factors of `GaussianProcess.ucb_pairs` (see there): the pair products of
    the context vectors, in the training points' coordinates or (`basis` given) in a basis."""

    quad: Tensor  # [p(p+1)/2, columns]: p = n, or r on the basis route
    mean: Tensor  # [n, columns]
    n_contexts: int
    n_gradient: int
    dim_c: int
    basis: Tensor | None = None  # basis route: [n, r] orthonormal, spanning every context vector
    # The vectors' own numerical basis (their SVD), whether or not the route above took it: the
    # compiled kernels of the same contexts reuse it rather than take the same SVD again.
    span: Tensor | None = None


@dataclass(frozen=True)
class Region:
    """A basis for contexts drawn afresh in a known box (`GaussianProcess.region_basis`)."""

    basis: Tensor  # [n, r] orthonormal, spanning the context vectors of the box
    residual_max: float  # a context set whose projection leaves more is not in its span


@dataclass(frozen=True)
class FitReport:
    attempts: int
    converged: bool
    neg_log_posterior: float  # the minimised objective (per data point)


class GaussianProcess:
    """An exact GP posterior with fixed hyperparameters (fit it with `fit_gp`)."""

    # `ucb_from_features` without autograd finishes its values in compiled passes (the same bits);
    # False: torch's passes, to time them beside the compiled ones.
    compiled_tail = True

    def __init__(
        self,
        train_x: Tensor,
        train_y_std: Tensor,
        lengthscale: Tensor,
        noise: float,
        mean_constant: float,
        y_mean: float = 0.0,
        y_std: float = 1.0,
        context_basis: bool = False,
        context_forms: bool = False,
        basis_tolerance: float = 0.0,
        forms_in_one_product: bool = False,
        region_tolerance: float = 0.0,
    ) -> None:
        self.train_x = train_x
        self.context_basis = context_basis  # the route of `context_features` (see `ucb_pairs`)
        self.basis_tolerance = basis_tolerance  # the relative rank cut of a context set's basis
        self.region_tolerance = region_tolerance  # the same for a box's basis (`region_basis`)
        self.forms_in_one_product = forms_in_one_product  # how `_basis_forms` multiplies
        self.context_forms = context_forms  # the route of `ucb_from_features` for few candidates
        self._basis_triangles: dict[int, tuple[Tensor, Tensor]] = {}
        self.train_y = train_y_std
        self.lengthscale = lengthscale.to(train_x)
        self.noise = float(noise)
        self.mean_constant = float(mean_constant)
        self.y_mean, self.y_std = y_mean, y_std
        n = train_x.shape[0]
        k = rbf(train_x, train_x, self.lengthscale)
        k.diagonal().add_(self.noise)
        self._chol = torch.linalg.cholesky(k)
        resid = (train_y_std - self.mean_constant).unsqueeze(-1)
        self._alpha = torch.cholesky_solve(resid, self._chol).squeeze(-1)  # [n]
        # K^{-1}, used for the variance gradient; n <= a few hundred, so explicit is fine.
        self._k_inv = torch.cholesky_inverse(self._chol)
        self.n = n

    @property
    def weights(self) -> Tensor:
        """alpha = K^{-1} (y - m): the posterior mean is m + k^T alpha."""
        return self._alpha

    @property
    def inverse(self) -> Tensor:
        """K^{-1} (with the noise on its diagonal)."""
        return self._k_inv

    @property
    def cholesky_factor(self) -> Tensor:
        """L, lower triangular, with L L^T = K (the noise on its diagonal)."""
        return self._chol

    @property
    def dim(self) -> int:
        return self.train_x.shape[-1]

    def cross_covariance(self, z: Tensor) -> Tensor:
        return rbf(z, self.train_x, self.lengthscale)

    def posterior(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """Latent posterior mean and variance at z [..., D] -> ([...], [...]); differentiable."""
        shape = z.shape[:-1]
        flat = z.reshape(-1, z.shape[-1])
        k_zx = self.cross_covariance(flat)  # [m, n]
        mean = self.mean_constant + k_zx @ self._alpha
        v = torch.linalg.solve_triangular(self._chol, k_zx.T, upper=False)  # [n, m]
        var = (1.0 - (v * v).sum(0)).clamp_min(VARIANCE_FLOOR)
        return mean.reshape(shape), var.reshape(shape)

    def ucb(self, z: Tensor, beta: float) -> Tensor:
        """mu + beta * sigma at z [..., D] -> [...]."""
        mean, var = self.posterior(z)
        return mean + beta * var.sqrt()

    def ucb_pairs(
        self, x: Tensor, contexts: Tensor, beta: float, gradient_contexts: Tensor | None = None,
        region: Region | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """UCB at every pair [x_b, c_j] ([b, N]); with `gradient_contexts` [M, d_c], also the
        exact gradient in c of the UCB at every pair [x_b, g_m] ([b, M, d_c]).

        The acquisitions of this package evaluate b candidates against one set of contexts.
        The RBF kernel factorises over the x and c coordinates, k([x, c], z_i) = kx_i(x) kc_i(c),
        so the variance term k^T K^{-1} k = sum_{i<=j} P_b,ij Q_j,ij with
        P_b,ij = w_ij kx_bi kx_bj K^{-1}_ij (w = 1 on the diagonal, 2 above it) and
        Q_N,ij = kc_Ni kc_Nj: one matrix product [b, n(n+1)/2] x [n(n+1)/2, N] gives every
        pair, and the same product with dQ/dc gives the context gradient, sharing P. Same
        values as `ucb` on the concatenated pairs, without materialising a [b * N, n]
        cross-covariance (several times faster at n = 100). Where the contexts stay fixed
        across calls, build `context_features` once and call `ucb_from_features`.

        With `context_basis` the model may take a shorter route: the context vectors kc_N (and
        the gradient ones) span few dimensions (a smooth kernel in a low-dimensional context:
        rank 12-60 of 100 for one context dimension), so with an orthonormal basis V [n, r] of
        their numerical span (SVD, numpy's rank tolerance) and coefficients a_N = V^T kc_N,
        k^T K^{-1} k = a_N^T B_b a_N with B_b = (kx_b * V)^T K^{-1} (kx_b * V) [r, r]: the same
        pair products, over r(r+1)/2 pairs instead of n(n+1)/2. It is no less accurate (nearer
        a Cholesky solve: fewer terms cancel) and several times cheaper where the columns are
        many; `context_features` takes it where it needs fewer multiply-adds per candidate. It
        changes the last digits, so it is a fidelity switch (every algorithm's option
        `context_basis`, on in both profiles). Contexts drawn afresh at every call in a
        known box take it through `region_basis` and `ucb_in_region`.
        """
        return self.ucb_from_features(x, self.context_features(contexts, gradient_contexts, region), beta)

    def context_features(
        self, contexts: Tensor, gradient_contexts: Tensor | None = None, region: Region | None = None
    ) -> "ContextFeatures":
        """The context side (Q and the mean weights) of `ucb_pairs`, reusable across candidates.

        `region` (a `region_basis` spanning every context vector, as for contexts drawn in a
        known box): the basis route projects onto it rather than taking the vectors' own SVD."""
        dim_c = contexts.shape[-1]
        ls_c = self.lengthscale[-dim_c:]
        train_c = self.train_x[:, -dim_c:]
        k_c = rbf(contexts, train_c, ls_c)  # [N, n]
        vectors = [k_c]
        m = 0
        if gradient_contexts is not None:
            m = gradient_contexts.shape[0]
            vectors.extend(self.context_gradient_vectors(gradient_contexts))  # kc_M, then dkc_M / dc_d
        mean = torch.cat(vectors, 0).T  # [n, N + M + M d_c]: every context-side vector
        basis = span = None
        if self.context_basis:
            found = numerical_basis(mean.T, self.basis_tolerance) if region is None else projected(mean.T, region)
            if found is not None:
                candidate_basis, coefficients = found
                span = candidate_basis if region is None else None
                n, r, columns = self.n, candidate_basis.shape[1], mean.shape[1]
                # multiply-adds per candidate: B_b and its pairs with the columns, against n's pairs
                if n * n * r + n * r * r + r * (r + 1) // 2 * columns < n * (n + 1) // 2 * columns:
                    basis = candidate_basis
                    vectors = list(coefficients.split([v.shape[0] for v in vectors]))
        sizes = [v.shape[0] for v in vectors]
        size = vectors[0].shape[1]
        quad = vectors[0].new_empty(sum(sizes), size * (size + 1) // 2)  # one row per vector
        blocks = quad.split(sizes)
        _triangle_products(vectors[0], vectors[0], blocks[0])
        if m:
            k_g = vectors[1]
            _triangle_products(k_g, k_g, blocks[1])
            for dk, block in zip(vectors[2:], blocks[2:]):  # d(kc_i kc_j) = dk_i kc_j + kc_i dk_j
                _triangle_products(dk, k_g, block)
                _triangle_products(k_g, dk, block, accumulate=True)
        return ContextFeatures(
            quad=quad.T, mean=mean, n_contexts=contexts.shape[0], n_gradient=m, dim_c=dim_c, basis=basis, span=span,
        )

    def context_gradient_vectors(self, contexts: Tensor) -> Tensor:
        """[1 + d_c, M, n]: the context vectors kc_M at `contexts` [M, d_c], then their derivatives
        d kc_Mi / d c_Md = -kc_Mi (c_Md - z_id) / l_d^2, one block per context dimension d."""
        dim_c = contexts.shape[-1]
        train_c, ls_c = self.train_x[:, -dim_c:], self.lengthscale[-dim_c:]
        k_g = rbf(contexts, train_c, ls_c)  # [M, n]
        diff = (contexts[:, None, :] - train_c[None, :, :]) / ls_c**2  # [M, n, d_c]
        return torch.stack([k_g, *(-k_g * diff[..., d] for d in range(dim_c))])

    def region_basis(self, box: Tensor) -> Region | None:
        """A `Region`: an orthonormal basis [n, r] of the context vectors kc(c) of every c in `box` [2, d_c]
        (either bound may be the larger), for contexts drawn afresh at every call; None where
        the basis route is off or the box needs a grid above REGION_GRID_MAX points.

        It is the numerical basis of kc on a grid of spacing REGION_SPACING lengthscales, cut
        as `region_tolerance` says: a smooth kernel's vectors between grid points lie in the
        grid's span as closely as the grid's own (to ~1e-13 at numpy's rank where the grid has
        many points per axis; not in boxes under a lengthscale wide), and `projected` checks
        that every context set it is given does, to the region's `residual_max`."""
        if not self.context_basis:
            return None
        dim_c = box.shape[-1]
        ls_c = self.lengthscale[-dim_c:]
        low, high = box.to(self.train_x).amin(0), box.to(self.train_x).amax(0)
        counts = [max(2, math.ceil(float(w) / (REGION_SPACING * float(l))) + 1) for w, l in zip(high - low, ls_c)]
        if math.prod(counts) > REGION_GRID_MAX:
            return None
        axes = [torch.linspace(float(lo), float(hi), count, dtype=self.train_x.dtype, device=self.train_x.device)
                for lo, hi, count in zip(low, high, counts)]
        grid = torch.cartesian_prod(*axes).reshape(-1, dim_c)
        vectors = rbf(grid, self.train_x[:, -dim_c:], ls_c)
        basis, coefficients = numerical_basis(vectors, self.region_tolerance)
        if self.region_tolerance == 0.0:
            return Region(basis, REGION_RESIDUAL_MAX)
        residual = float((vectors - coefficients @ basis.T).abs().max())
        return Region(basis, max(REGION_RESIDUAL_MAX, REGION_RESIDUAL_FACTOR * residual))

    def ucb_in_region(self, x: Tensor, contexts: Tensor, region: Region, beta: float) -> Tensor | None:
        """UCB [b, N] at every pair (x_b, c_j) on the basis route, with the contexts' vectors
        projected onto `region` (a `region_basis`): a_j = V^T kc_j and k^T K^{-1} k =
        a_j^T B_b a_j (`_basis_forms`). None where some context's vector is
        further than the region's `residual_max` from the basis's span, or where the basis is so
        large that the direct [n, n] forms need fewer multiply-adds (two context dimensions,
        say). Differentiable in x."""
        (b, dim_x), m = x.shape, contexts.shape[0]
        n, r = region.basis.shape
        # multiply-adds: the forms B_b and their products with the coefficients, plus the
        # projection and its check (once per call), against an [n, n] form per candidate; the
        # direct route's one large product runs about twice as fast per multiply-add (measured)
        if 2 * (b * (n * n * r + n * r * r + m * r * r) + 2 * m * n * r) >= b * m * n * n:
            return None
        k_c = rbf(contexts, self.train_x[:, dim_x:], self.lengthscale[dim_x:])  # [N, n]
        found = projected(k_c, region)
        if found is None:
            return None
        coefficients = found[1]  # [N, r]
        train_x, ls_x = self.train_x[:, :dim_x], self.lengthscale[:dim_x]
        rows = []
        for chunk in x.split(REGION_CHUNK):
            k_x = rbf(chunk, train_x, ls_x)  # [c, n]
            c = k_x.shape[0]
            forms = self._basis_forms(k_x, region.basis)  # [c, r, r]
            # a_j^T B_b a_j: one product with the forms side by side (twice a batched product's speed)
            products = coefficients @ forms.transpose(0, 1).reshape(r, c * r)  # [N, c * r]
            quad = (products.view(-1, c, r) * coefficients.unsqueeze(1)).sum(-1).T  # [c, N]
            mean = (k_x * self._alpha) @ k_c.T
            rows.append(self.mean_constant + mean + beta * (1.0 - quad).clamp_min(VARIANCE_FLOOR).sqrt())
        return torch.cat(rows, 0)

    def ucb_from_features(
        self, x: Tensor, features: "ContextFeatures", beta: float, detach_gradient: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """The candidate side of `ucb_pairs`: differentiable in x.

        With `detach_gradient` the context gradients are computed outside autograd (WDRBO's
        detached L(x)): the backward pass then multiplies only the value columns, not the
        2-3x more gradient columns. With `context_forms`, a call of a few candidates on the
        pairs route (an Adam step on FORMS_MIN_POINTS or more points) takes `quadratic_forms`,
        and its context gradients, if outside autograd, `_context_gradients_by_forms`.
        """
        dim_x = x.shape[-1]
        train_x, ls_x = self.train_x[:, :dim_x], self.lengthscale[:dim_x]
        n_ctx = features.n_contexts
        split = detach_gradient and features.n_gradient > 0 and torch.is_grad_enabled()
        if self._forms_route(x.shape[0], features, gradient_outside_autograd=detach_gradient or not torch.is_grad_enabled()):
            k_x = rbf(x, train_x, ls_x)  # [b, n]
            values = features.mean[:, :n_ctx]  # the contexts' columns (all, without gradient points)
            quad = self.quadratic_forms(k_x, values.T)
            sigma = (1.0 - quad).clamp_min(VARIANCE_FLOOR).sqrt()
            ucb = self.mean_constant + (k_x * self._alpha) @ values + beta * sigma
            if features.n_gradient == 0:
                return ucb, None
            with torch.no_grad():
                return ucb, self._context_gradients_by_forms(k_x.detach(), features, beta)
        if features.n_gradient == 0 and not (x.requires_grad and torch.is_grad_enabled()):
            if (self.compiled_tail and features.n_contexts >= COMPILED_TAIL_MIN_CONTEXTS
                    and x.device.type == "cpu" and x.dtype == torch.float64):  # values only
                return self._ucb_without_gradient(x, features, beta), None
        quads, means = [], []
        for chunk in x.split(PAIR_CHUNK if features.basis is None else BASIS_CHUNK):
            # (The order of these operations fixes autograd's summation order: records depend on it.)
            k_x, pair = self._candidate_pairs(chunk, features)
            weighted = k_x * self._alpha
            if split:
                quad_value, mean_value = pair @ features.quad[:, :n_ctx], weighted @ features.mean[:, :n_ctx]
                with torch.no_grad():
                    quad_rest, mean_rest = pair @ features.quad[:, n_ctx:], weighted @ features.mean[:, n_ctx:]
                quads.append(torch.cat([quad_value, quad_rest], 1))
                means.append(torch.cat([mean_value, mean_rest], 1))
            else:
                quads.append(pair @ features.quad)
                means.append(weighted @ features.mean)
        quad, mean = torch.cat(quads, 0), torch.cat(means, 0)
        m, d_c = features.n_gradient, features.dim_c
        sigma = (1.0 - quad[:, :n_ctx]).clamp_min(VARIANCE_FLOOR).sqrt()
        ucb = self.mean_constant + mean[:, :n_ctx] + beta * sigma
        if m == 0:
            return ucb, None
        sigma_g = (1.0 - quad[:, n_ctx : n_ctx + m]).clamp_min(VARIANCE_FLOOR).sqrt()
        d_var = -quad[:, n_ctx + m :].reshape(-1, d_c, m)
        d_mean = mean[:, n_ctx + m :].reshape(-1, d_c, m)
        grad = d_mean + beta * d_var / (2.0 * sigma_g.unsqueeze(1))
        return ucb, grad.transpose(1, 2)

    def _ucb_without_gradient(self, x: Tensor, features: "ContextFeatures", beta: float) -> Tensor:
        """`ucb_from_features`'s values [b, N] on the CPU without autograd: the same products chunk
        by chunk, the same elementwise operations in two compiled passes and torch's sqrt per
        chunk, written into one array, instead of torch's six passes over [b, N] and two
        concatenations (the screening pass's [512, 1024] arrays). torch's vectorised sqrt is not
        always correctly rounded (1 ulp off in ~1 % of cases), so it stays torch's; chunks of
        BASIS_CHUNK or PAIR_CHUNK rows keep its vector and scalar parts where they were. The same
        bits (tests/models/test_gp.py)."""
        from wdrbo_dist.models.compiled_ucb import ucb_from_sigma, variances_in_place

        out = x.new_empty(x.shape[0], features.n_contexts)
        host = out.numpy()
        start = 0
        for chunk in x.split(PAIR_CHUNK if features.basis is None else BASIS_CHUNK):
            k_x, pair = self._candidate_pairs(chunk, features)
            quad, mean = pair @ features.quad, (k_x * self._alpha) @ features.mean
            stop = start + chunk.shape[0]
            variances_in_place(quad.numpy(), VARIANCE_FLOOR)
            sigma = quad.sqrt_()
            ucb_from_sigma(host[start:stop], mean.numpy(), sigma.numpy(), self.mean_constant, float(beta))
            start = stop
        return out

    def _candidate_pairs(self, chunk: Tensor, features: "ContextFeatures") -> tuple[Tensor, Tensor]:
        """The candidate side of `ucb_pairs` for a chunk [c, d_x]: (kx [c, n], its pair products
        [c, n(n+1)/2] weighted by K^{-1}, or on the basis route `_basis_pairs`)."""
        dim_x = chunk.shape[-1]
        k_x = rbf(chunk, self.train_x[:, :dim_x], self.lengthscale[:dim_x])  # [c, n]
        if features.basis is None:
            rows, cols, k_inv_weighted = self._upper_triangle()
            # index_select, not k_x[:, rows]: the same values, and a backward (index_add) ~2x cheaper
            return k_x, k_x.index_select(1, rows) * k_x.index_select(1, cols) * k_inv_weighted
        return k_x, self._basis_pairs(k_x, features.basis)

    def _forms_route(self, candidates: int, features: "ContextFeatures", gradient_outside_autograd: bool = False) -> bool:
        """Whether `ucb_from_features` takes `quadratic_forms` rather than the pair products:
        for a few candidates (their [b, n(n+1)/2] x [n(n+1)/2, N] product runs at a fraction of
        the BLAS's speed and streams the whole pair matrix) on data large enough for it to pay.
        Context gradients go along only where no x-gradient is taken through them (WDRBO's
        pass over its Lipschitz points)."""
        return (
            self.context_forms and features.basis is None
            and (features.n_gradient == 0 or gradient_outside_autograd)
            and candidates <= FORMS_MAX_BATCH and self.n >= FORMS_MIN_POINTS
        )

    def _context_gradients_by_forms(self, k_x: Tensor, features: "ContextFeatures", beta: float) -> Tensor:
        """The context gradients [b, M, d_c] of `ucb_from_features` at the M gradient contexts, from
        the quadratic forms: with t_bg = K^{-1} (kx_b * kc_g), the variance term is
        sum_j kx_bj kc_gj t_bgj and its c-derivative 2 sum_j kx_bj dkc_gj t_bgj, so one product
        [M, n] x [n, b n] gives both (no gradient in x)."""
        b, n = k_x.shape
        n_ctx, m, d_c = features.n_contexts, features.n_gradient, features.dim_c
        vectors = features.mean.T  # [N + M + M d_c, n]: the contexts', the gradient points', their derivatives
        k_g, d_k_g = vectors[n_ctx : n_ctx + m], vectors[n_ctx + m :].view(d_c, m, n)
        solved = (k_g @ _scaled_inverses(k_x, self._k_inv)).view(m, b, n).mul_(k_x)  # [M, b, n]: kx_bj t_bgj
        sigma = (1.0 - (solved * k_g.unsqueeze(1)).sum(-1).T).clamp_min(VARIANCE_FLOOR).sqrt()  # [b, M]
        d_quad = 2.0 * torch.einsum("gbj,dgj->bgd", solved, d_k_g)  # [b, M, d_c]
        d_mean = ((k_x * self._alpha) @ features.mean[:, n_ctx + m :]).view(b, d_c, m).transpose(1, 2)
        return d_mean - beta * d_quad / (2.0 * sigma.unsqueeze(-1))

    def quadratic_forms(self, k_x: Tensor, k_c: Tensor) -> Tensor:
        """q [b, N] = k^T K^{-1} k for k = kx_b * kc_N, every candidate b (k_x [b, n]) and context
        N (k_c [N, n], constant), as kc_N^T A_b kc_N with A_b = diag(kx_b) K^{-1} diag(kx_b).

        Where an x-gradient will be taken and `context_forms` is on, `_QuadraticForms` gives it
        in closed form from what its forward pass keeps; otherwise one batched product, with
        autograd through it where needed (the reference profile's values and gradients)."""
        if self.context_forms and k_x.requires_grad and torch.is_grad_enabled():
            return _QuadraticForms.apply(k_x, k_c, self._k_inv)
        a = k_x.unsqueeze(-1) * self._k_inv * k_x.unsqueeze(-2)  # [b, n, n]
        return (k_c @ a).mul_(k_c).sum(-1)  # in place: the [b, N, n] product is written once

    def _basis_forms(self, k_x: Tensor, basis: Tensor) -> Tensor:
        """The candidate side on the basis route: B_b = (kx_b * V)^T K^{-1} (kx_b * V) [c, r, r].

        With `forms_in_one_product` (option `basis_forms: one_product`) the left factor's kx_b
        moves onto the solved side, B_b = V^T (kx_b * K^{-1} (kx_b * V)), and one product with V^T
        gives every candidate's form: the same values to rounding, without the batch of [r, n] x
        [n, r] products that runs at a fraction of the BLAS's speed."""
        c, (n, r) = k_x.shape[0], basis.shape
        weighted = k_x.unsqueeze(-1) * basis  # [c, n, r]
        # K^{-1} (kx_b * V) for every b in one product
        solved = self._k_inv @ weighted.transpose(0, 1).reshape(n, c * r)  # [n, c r]
        if self.forms_in_one_product:
            scaled = solved.view(n, c, r) * k_x.T.unsqueeze(-1)  # kx_bi (K^{-1} (kx_b * V))_iq
            return (basis.T @ scaled.view(n, c * r)).view(r, c, r).transpose(0, 1)
        return weighted.transpose(1, 2) @ solved.reshape(n, c, r).transpose(0, 1)

    def _basis_pairs(self, k_x: Tensor, basis: Tensor) -> Tensor:
        """`_basis_forms` on the pairs k <= l, weighted as `_upper_triangle` weights K^{-1}
        ([c, r(r+1)/2])."""
        c, r = k_x.shape[0], basis.shape[1]
        flat, weights = self._basis_triangle(r)
        return self._basis_forms(k_x, basis).reshape(c, r * r).index_select(1, flat) * weights

    def _basis_triangle(self, size: int) -> tuple[Tensor, Tensor]:
        """Flat indices and weights (1 on the diagonal, 2 above) of the pairs k <= l of a
        [size, size] form (cached: asked for at every Adam step)."""
        if size not in self._basis_triangles:
            rows, cols = torch.triu_indices(size, size, device=self.train_x.device)
            weights = torch.where(rows == cols, 1.0, 2.0).to(self._k_inv)
            self._basis_triangles[size] = (rows * size + cols, weights)
        return self._basis_triangles[size]

    def _upper_triangle(self) -> tuple[Tensor, Tensor, Tensor]:
        """Indices of the pairs i <= j and the weighted K^{-1} entries on them (cached)."""
        if getattr(self, "_triu", None) is None:
            rows, cols = torch.triu_indices(self.n, self.n, device=self.train_x.device)
            weights = torch.where(rows == cols, 1.0, 2.0).to(self._k_inv)
            self._triu = (rows, cols, self._k_inv[rows, cols] * weights)
        return self._triu

    def ucb_and_gradient(self, z: Tensor, beta: float, dims: slice) -> tuple[Tensor, Tensor]:
        """UCB and its analytic gradient w.r.t. the coordinates `dims` of z.

        For the RBF kernel, d k(z, x_i)/dz = -k(z, x_i) (z - x_i)/l^2, so
        d mu = sum_i alpha_i d k_i and d var = -2 sum_i d k_i (K^{-1} k)_i. This is exact, and
        cheaper than a backward pass (used for WDRBO's Lipschitz constant, spec 3.1).
        Returns (ucb [...], grad [..., len(dims)]). Differentiable w.r.t. z as well.
        """
        shape = z.shape[:-1]
        flat = z.reshape(-1, z.shape[-1])
        k_zx = self.cross_covariance(flat)  # [m, n]
        mean = self.mean_constant + k_zx @ self._alpha
        w = k_zx @ self._k_inv  # [m, n] = (K^{-1} k)^T
        var = (1.0 - (w * k_zx).sum(-1)).clamp_min(VARIANCE_FLOOR)
        sigma = var.sqrt()
        ls2 = self.lengthscale[dims] ** 2
        diff = (flat[:, None, dims] - self.train_x[None, :, dims]) / ls2  # [m, n, g]
        dk = -k_zx.unsqueeze(-1) * diff  # [m, n, g]
        d_mean = torch.einsum("mng,n->mg", dk, self._alpha)
        d_var = -2.0 * torch.einsum("mng,mn->mg", dk, w)
        d_ucb = d_mean + beta * d_var / (2.0 * sigma.unsqueeze(-1))
        ucb = mean + beta * sigma
        return ucb.reshape(shape), d_ucb.reshape(*shape, d_ucb.shape[-1])

    def context_gradient_norm(self, x: Tensor, contexts: Tensor, beta: float) -> Tensor:
        """||grad_c UCB(x_b, c_b)||_2 for candidates x [b, d_x] and one context each [b, d_c] -> [b],
        differentiable in x by its closed-form gradient (`context_gradient_jacobian`): WDRBO's
        differentiated L(x) at each candidate's maximising Lipschitz point. The values of
        `ucb_and_gradient`'s norm and the x-gradient of autograd's double backward through it,
        to rounding, in a few dozen operations on [b, n] arrays where the double backward takes
        many more, each at torch's fixed cost per call (`benchmarks/routes.py adam-step`)."""
        return _ContextGradientNorm.apply(x, contexts, self, beta)


Array = TypeVar("Array", np.ndarray, Tensor)


def context_gradient_jacobian(
    xp: ModuleType, x: Array, contexts: Array, train: Array, lengthscale: Array, inverse: Array, weights: Array,
    beta: float,
) -> tuple[Array, Array]:
    """(L [b], dL/dx [b, d_x]) for L = ||g||, g = grad_c UCB(x, c) = dk_c^T alpha - beta N / sigma,
    N = dk_c^T w, w = K^{-1} k; written once for an array namespace `xp` (NumPy or torch).

    With u_ie = -(x_e - z_ie) / l_e^2 (so dk_i/dx_e = k_i u_ie and d(dk_c)_id/dx_e = (dk_c)_id u_ie):
    dN_d/dx_e = sum_i (dk_c)_id (u_ie w_i + (K^{-1} dk_x)_ie), dsigma/dx_e = -(dk_x^T w)_e / sigma,
    dg_d/dx_e = sum_i (dk_c)_id u_ie alpha_i - beta (dN_d/dx_e / sigma - N_d dsigma/dx_e / sigma^2),
    dL/dx = g^T dg/dx / L (0 where L = 0; dsigma = 0 where the variance is at its floor)."""
    dim_x = x.shape[-1]
    z = xp.concatenate([x, contexts], axis=-1)
    offset = z[:, None, :] - train[None, :, :]  # [b, n, D]
    scaled = offset / lengthscale**2  # -u
    k = xp.exp(-0.5 * (offset * scaled).sum(-1))  # [b, n]
    w = k @ inverse
    var = 1.0 - (w * k).sum(-1)
    sigma = xp.sqrt(xp.clip(var, min=VARIANCE_FLOOR))[:, None]  # [b, 1]
    dk = -k[..., None] * scaled  # dk_i / dz
    dk_c, dk_x = dk[..., dim_x:], dk[..., :dim_x]
    numerator = xp.einsum("bnd,bn->bd", dk_c, w)
    gradient = xp.einsum("bnd,n->bd", dk_c, weights) - beta * numerator / sigma  # [b, d_c]
    norm = xp.sqrt((gradient * gradient).sum(-1))
    # dg/dx = dk_c^T (u (alpha - beta w / sigma) - beta K^{-1} dk_x / sigma) + beta N dsigma / sigma^2
    inner = -scaled[..., :dim_x] * (weights - beta * w / sigma)[..., None] - (beta / sigma)[..., None] * (inverse @ dk_x)
    d_sigma = xp.where(var[:, None] > VARIANCE_FLOOR, -(dk_x * w[..., None]).sum(1) / sigma, 0.0)  # [b, d_x]
    d_gradient = dk_c.swapaxes(1, 2) @ inner + (beta / sigma**2)[..., None] * numerator[..., None] * d_sigma[:, None, :]
    jacobian = xp.einsum("bd,bde->be", gradient, d_gradient) / xp.clip(norm, min=1e-300)[:, None]
    return norm, xp.where(norm[:, None] > 0, jacobian, 0.0)


def _scaled_inverses(k_x: Tensor, k_inv: Tensor) -> Tensor:
    """[diag(kx_1) K^{-1}, ..., diag(kx_b) K^{-1}] side by side [n, b n]: a context vector kc times
    it gives (K^{-1} (kx_b * kc))^T for every candidate b (K^{-1} is symmetric) in one product."""
    b, n = k_x.shape
    return (k_x.unsqueeze(-1) * k_inv).transpose(0, 1).reshape(n, b * n)


class _QuadraticForms(torch.autograd.Function):
    """`GaussianProcess.quadratic_forms` with its gradient in k_x in closed form.

    The forward pass forms s_Nb = K^{-1} (kx_b * kc_N) for every pair in one product
    kc [N, n] x [diag(kx_1) K^{-1}, ..., diag(kx_b) K^{-1}] [n, b n] (K^{-1} symmetric), and
    q_bN = sum_j kx_bj kc_Nj s_Nbj. Since dq_bN/dkx_bj = 2 kc_Nj s_Nbj, the backward pass is one
    reduction over the contexts of the array the forward pass keeps, where autograd through
    the product would take a second product of the same size. The context side is constant.
    """

    @staticmethod
    def forward(ctx, k_x: Tensor, k_c: Tensor, k_inv: Tensor) -> Tensor:  # type: ignore[override]
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            raise ValueError("quadratic_forms differentiates in the candidates' k_x only")
        b, n = k_x.shape
        weighted = (k_c @ _scaled_inverses(k_x, k_inv)).view(-1, b, n).mul_(k_c.unsqueeze(1))  # [N, b, n]: kc_Nj s_Nbj
        ctx.save_for_backward(weighted)
        return (weighted * k_x).sum(-1).T

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        (weighted,) = ctx.saved_tensors
        return 2.0 * torch.einsum("bN,Nbj->bj", grad, weighted), None, None


def _triangle_products(left: Tensor, right: Tensor, out: Tensor, accumulate: bool = False) -> None:
    """out[:, k] = left[:, i] * right[:, j] (or += with `accumulate`) for the k-th pair i <= j of
    the columns in `torch.triu_indices` order: a row i of the triangle at a time, written in
    place. The same products as gathering the pairs' columns, without the [rows, p(p+1)/2]
    gathered copies (`benchmarks/profile_run.py`, column "build")."""
    size, start = left.shape[1], 0
    for i in range(size):
        segment = out[:, start : start + size - i]
        if accumulate:
            segment.add_(left[:, i : i + 1] * right[:, i:])
        else:
            torch.mul(left[:, i : i + 1], right[:, i:], out=segment)
        start += size - i


def _cpu_views(tensors: tuple[Tensor, ...]) -> list[np.ndarray]:
    """NumPy views of CPU tensors (no copy)."""
    return list(map(Tensor.numpy, tensors))


class _ContextGradientNorm(torch.autograd.Function):
    """`GaussianProcess.context_gradient_norm`: the forward pass forms the Jacobian, the backward
    pass scales it. On the CPU the arrays are small ([b, n]) and NumPy's cost per operation is a
    fraction of torch's; elsewhere torch computes the same formula on the device."""

    @staticmethod
    def forward(ctx, x: Tensor, contexts: Tensor, model: "GaussianProcess", beta: float) -> Tensor:  # type: ignore[override]
        arrays = (x.detach(), contexts, model.train_x, model.lengthscale, model.inverse, model.weights)
        if x.device.type == "cpu":
            norm, jacobian = map(torch.from_numpy, context_gradient_jacobian(np, *_cpu_views(arrays), beta))
        else:
            norm, jacobian = context_gradient_jacobian(torch, *arrays, beta)
        ctx.save_for_backward(jacobian)
        return norm

    @staticmethod
    def backward(ctx, grad_norm: Tensor) -> tuple[Tensor, None, None, None]:  # type: ignore[override]
        (jacobian,) = ctx.saved_tensors
        return grad_norm.unsqueeze(-1) * jacobian, None, None, None


def numerical_basis(vectors: Tensor, relative_tolerance: float = 0.0) -> tuple[Tensor, Tensor]:
    """(V [n, r], A [rows, r]) with orthonormal V and vectors ~= A V^T: the right singular
    vectors above numpy's rank tolerance (sigma_1 * max(rows, n) * eps) or, where larger,
    sigma_1 * `relative_tolerance` (option `basis_tolerance`: every vector is then within
    sigma_{r+1} of the span)."""
    left, singular, right_t = torch.linalg.svd(vectors, full_matrices=False)
    if singular.numel() == 0 or not bool(singular[0] > 0):
        return vectors.new_zeros(vectors.shape[-1], 0), vectors.new_zeros(vectors.shape[0], 0)
    tolerance = singular[0] * max(vectors.shape) * torch.finfo(vectors.dtype).eps
    if relative_tolerance > 0.0:
        tolerance = torch.maximum(tolerance, singular[0] * relative_tolerance)
    rank = int((singular > tolerance).sum())
    return right_t[:rank].T, left[:, :rank] * singular[:rank]


def projected(vectors: Tensor, region: Region) -> tuple[Tensor, Tensor] | None:
    """(basis, coefficients [rows, r]) of `vectors` [rows, n] in the region's orthonormal basis
    [n, r]; None where some vector is further than the region's `residual_max` from its span."""
    basis = region.basis
    coefficients = vectors @ basis
    if float((vectors - coefficients @ basis.T).abs().max()) > region.residual_max:
        return None
    return basis, coefficients


class _MapObjective:
    """-(log N(y | m, K + s2 I) + log priors) / n and its analytic gradient, in NumPy.

    The same objective as gpytorch's ExactMarginalLogLikelihood plus the priors, divided by n.
    Parameters theta = (lengthscales, noise variance, constant mean). Analytic gradients
    (d/dtheta = 0.5 tr((K^-1 - a a^T) dK/dtheta)) make a fit ~10x cheaper than autograd here.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, ls_prior: tuple[float, float]) -> None:
        self.n, self.dim = x.shape
        self.y = y
        self.sq_diff = (x[:, None, :] - x[None, :, :]) ** 2  # [n, n, D]
        self.ls_loc, self.ls_scale = ls_prior
        self.const = 0.5 * self.n * math.log(2.0 * math.pi)

    @staticmethod
    def _log_normal(v: np.ndarray, loc: float, scale: float) -> tuple[np.ndarray, np.ndarray]:
        """Log density of LogNormal(loc, scale) at v and its derivative."""
        lv = np.log(v)
        logp = -lv - math.log(scale * math.sqrt(2.0 * math.pi)) - (lv - loc) ** 2 / (2.0 * scale**2)
        dlogp = -1.0 / v - (lv - loc) / (scale**2 * v)
        return logp, dlogp

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        dim, n = self.dim, self.n
        ls, noise, mean = theta[:dim], theta[dim], theta[dim + 1]
        if np.any(ls <= 0) or noise <= 0:
            return FAILED_OBJECTIVE, np.zeros_like(theta)
        scaled = self.sq_diff / ls**2  # [n, n, D]
        k_rbf = np.exp(-0.5 * scaled.sum(-1))
        k = k_rbf + noise * np.eye(n)
        try:
            chol = np.linalg.cholesky(k)
        except np.linalg.LinAlgError:
            return FAILED_OBJECTIVE, np.zeros_like(theta)
        resid = self.y - mean
        chol_inv = scipy.linalg.solve_triangular(chol, np.eye(n), lower=True, check_finite=False)
        k_inv = chol_inv.T @ chol_inv
        alpha = k_inv @ resid
        nll = 0.5 * resid @ alpha + np.log(np.diag(chol)).sum() + self.const
        w = k_inv - np.outer(alpha, alpha)
        # dK/dl_k = k_rbf * (x_ik - x_jk)^2 / l_k^3
        g_ls = 0.5 * np.einsum("ij,ijk->k", w * k_rbf, scaled) / ls
        g_noise = 0.5 * np.trace(w)
        g_mean = -alpha.sum()
        lp_ls, dlp_ls = self._log_normal(ls, self.ls_loc, self.ls_scale)
        lp_nz, dlp_nz = self._log_normal(np.array([noise]), *NOISE_PRIOR)
        value = (nll - lp_ls.sum() - lp_nz[0]) / n
        grad = np.concatenate([g_ls - dlp_ls, [g_noise - dlp_nz[0]], [g_mean]]) / n
        if not math.isfinite(value) or not np.all(np.isfinite(grad)):
            return FAILED_OBJECTIVE, np.zeros_like(theta)
        return float(value), grad


def fit_gp(
    train_x: Tensor, train_y: Tensor, generator: torch.Generator, context_basis: bool = False,
    context_forms: bool = False, compiled_objective: bool = False, basis_tolerance: float = 0.0,
    forms_in_one_product: bool = False, region_tolerance: float = 0.0,
) -> tuple[GaussianProcess, FitReport]:
    """MAP-fit the GP of spec 1.4 on (train_x, train_y) from the prior modes (`context_basis`,
    `context_forms`, `basis_tolerance`, `forms_in_one_product`, `region_tolerance`: the routes the fitted model
    takes for context sets, see `GaussianProcess.ucb_pairs`, `quadratic_forms`, `_basis_forms`;
    `compiled_objective`: the objective's numba kernels, models/compiled_fit.py, rather than
    NumPy's `_MapObjective`).

    An attempt whose L-BFGS-B fails (other than at its iteration limit, as in BoTorch) or meets
    a non-finite value is retried from hyperparameters drawn from the priors with `generator`,
    up to 5 attempts as BoTorch does; if none converges, the best attempt is kept (and the
    report says so) where BoTorch raises: a run is not lost to a hard fit.
    """
    dtype, device = train_x.dtype, train_x.device
    n, dim = train_x.shape
    y_std, y_mean, y_scale = standardize(train_y)
    loc, scale = lengthscale_prior(dim)
    host_x, host_y = train_x.detach().cpu().numpy(), y_std.detach().cpu().numpy()
    if compiled_objective:
        from wdrbo_dist.models.compiled_fit import CompiledMapObjective

        objective: Callable[[np.ndarray], tuple[float, np.ndarray]] = CompiledMapObjective(
            host_x, host_y, (loc, scale))
    else:
        objective = _MapObjective(host_x, host_y, (loc, scale))
    lower = np.array([LENGTHSCALE_MIN] * dim + [NOISE_MIN, -np.inf])
    upper = np.full(dim + 2, np.inf)

    start = np.array([math.exp(loc - scale**2)] * dim + [math.exp(NOISE_PRIOR[0] - NOISE_PRIOR[1] ** 2), 0.0])
    best: tuple[float, np.ndarray] | None = None
    converged = False
    attempts = 0
    for attempts in range(1, MAX_FIT_ATTEMPTS + 1):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = minimize_lbfgsb(objective, start, lower, upper)
        value = float(res.fun)
        if math.isfinite(value) and (best is None or value < best[0]):
            best = (value, res.x.copy())
        # BoTorch's rule: L-BFGS-B stopping at its iteration or evaluation limit (status 1) is
        # not a failed attempt; anything else unsuccessful is retried.
        if (res.success or res.status == 1) and math.isfinite(value) and value < FAILED_OBJECTIVE:
            converged = True
            best = (value, res.x.copy())
            break
        # Retry from a draw of the priors (on the CPU generator: identical on every device).
        ls = torch.exp(loc + scale * torch.randn(dim, generator=generator, dtype=torch.float64))
        nz = torch.exp(NOISE_PRIOR[0] + NOISE_PRIOR[1] * torch.randn(1, generator=generator, dtype=torch.float64))
        start = np.concatenate([np.maximum(ls.numpy(), LENGTHSCALE_MIN), np.maximum(nz.numpy(), NOISE_MIN), [0.0]])
    assert best is not None, "GP fit produced no finite objective value"
    theta = torch.tensor(best[1], dtype=dtype, device=device)
    model = GaussianProcess(
        train_x,
        y_std,
        lengthscale=theta[:dim].clamp_min(LENGTHSCALE_MIN),
        noise=float(theta[dim].clamp_min(NOISE_MIN)),
        mean_constant=float(theta[dim + 1]),
        y_mean=y_mean,
        y_std=y_scale,
        context_basis=context_basis,
        context_forms=context_forms,
        basis_tolerance=basis_tolerance,
        forms_in_one_product=forms_in_one_product,
        region_tolerance=region_tolerance,
    )
    return model, FitReport(attempts=attempts, converged=converged, neg_log_posterior=best[0])
