"""The candidate side of the GP's UCB at every (candidate, context) pair: the pair products
weighted by K^{-1}, the basis route's forms, the quadratic forms for a few candidates, and the
values of a box's fresh contexts on its basis (`ucb_in_region`).

`PairRoutes` is a part of `gp.GaussianProcess`; the context side is `context_features.ContextSide`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from wdrbo_dist.models.context_features import ContextFeatures, ContextSide, Region, projected
from wdrbo_dist.models.kernel import VARIANCE_FLOOR, rbf

PAIR_CHUNK = 128  # candidates per block in `ucb_pairs` (keeps the [c, n(n+1)/2] block in cache)
BASIS_CHUNK = 64  # candidates per block on the basis route (keeps the [c, n, r] block in cache)
# `ucb_from_features` without autograd finishes in compiled passes from this many contexts on
# (KDE samples, grids, fresh sets: 0.7-0.9x the time per call); below, torch's passes over small
# arrays cost about the same (timed with `GaussianProcess.compiled_tail` off and on).
COMPILED_TAIL_MIN_CONTEXTS = 256
REGION_CHUNK = 16  # candidates per block in `ucb_in_region` (a [c, N, r] block)
# The candidate-side quadratic forms (`quadratic_forms`) replace the pair products for calls of at
# most FORMS_MAX_BATCH candidates (Adam's restarts, not the screening pass) once the data have
# FORMS_MIN_POINTS points (the crossover measured by benchmarks/speed/routes.py forms-step)
FORMS_MAX_BATCH = 16
FORMS_MIN_POINTS = 48


class PairRoutes(ContextSide):
    """The candidate side of `GaussianProcess` (its posterior's weights, K^{-1} and route options)."""

    # `ucb_from_features` without autograd finishes its values in compiled passes (the same bits);
    # False: torch's passes, to time them beside the compiled ones.
    compiled_tail = True

    mean_constant: float
    _alpha: Tensor
    _k_inv: Tensor
    _basis_triangles: dict[int, tuple[Tensor, Tensor]]

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
        their numerical span (SVD, cut at sigma_1 * kernel.BASIS_TOLERANCE) and coefficients
        a_N = V^T kc_N, k^T K^{-1} k = a_N^T B_b a_N with B_b = (kx_b * V)^T K^{-1} (kx_b * V)
        [r, r]: the same pair products, over r(r+1)/2 pairs instead of n(n+1)/2. It is as
        accurate to ~5e-8 in the variances (nearer a Cholesky solve where no vector is cut:
        fewer terms cancel) and several times cheaper where the columns are many;
        `context_features` takes it where it needs fewer multiply-adds per candidate. It
        changes the last digits, so it is a route (NumericalSettings.context_basis, on every
        device). Contexts drawn afresh at every call in a known box take it through
        `region_basis` and `ucb_in_region`.
        """
        return self.ucb_from_features(x, self.context_features(contexts, gradient_contexts, region), beta)

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
        2-3x more gradient columns. A call of a few candidates on the pairs route (an Adam
        step on FORMS_MIN_POINTS or more points) takes `quadratic_forms`, and its context
        gradients, if outside autograd, `_context_gradients_by_forms`.
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
        from wdrbo_dist.models.compiled_elementwise import ucb_from_sigma, variances_in_place

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
            features.basis is None
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

        Where an x-gradient will be taken, `_QuadraticForms` gives it in closed form from what
        its forward pass keeps; otherwise one batched product."""
        if k_x.requires_grad and torch.is_grad_enabled():
            return _QuadraticForms.apply(k_x, k_c, self._k_inv)
        a = k_x.unsqueeze(-1) * self._k_inv * k_x.unsqueeze(-2)  # [b, n, n]
        return (k_c @ a).mul_(k_c).sum(-1)  # in place: the [b, N, n] product is written once

    def _basis_forms(self, k_x: Tensor, basis: Tensor) -> Tensor:
        """The candidate side on the basis route: B_b = (kx_b * V)^T K^{-1} (kx_b * V) [c, r, r].

        The left factor's kx_b moves onto the solved side, B_b = V^T (kx_b * K^{-1} (kx_b * V)),
        and one product with V^T gives every candidate's form, without a batch of [r, n] x
        [n, r] products (which runs at a fraction of the BLAS's speed)."""
        c, (n, r) = k_x.shape[0], basis.shape
        weighted = k_x.unsqueeze(-1) * basis  # [c, n, r]
        # K^{-1} (kx_b * V) for every b in one product
        solved = self._k_inv @ weighted.transpose(0, 1).reshape(n, c * r)  # [n, c r]
        scaled = solved.view(n, c, r) * k_x.T.unsqueeze(-1)  # kx_bi (K^{-1} (kx_b * V))_iq
        return (basis.T @ scaled.view(n, c * r)).view(r, c, r).transpose(0, 1)

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
