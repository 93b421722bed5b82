"""An Adam step's acquisition in compiled calls (option `adam_pass: compiled`): ERBO's, WDRBO's
and SBO-KDE's mean UCB (`CompiledUCB`), the UCB at every (candidate, context) pair that
DRBO-KDE, the minimax and StableOpt take a function of (`CompiledPairs`, `CompiledFreshPairs`),
and GP-UCB's posterior UCB on x alone (`CompiledPosteriorUCB`).

Why: the arithmetic is small (a few M multiply-adds at n = 99) but torch takes it in dozens of
calls at several us each; here one numba kernel returns the values and their closed-form
x-gradients. The comment above `CompiledUCB` derives them.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch import Tensor

from wdrbo_dist.models.gp import (
    REGION_RESIDUAL_MAX,
    VARIANCE_FLOOR,
    ContextFeatures,
    GaussianProcess,
    Region,
    numerical_basis,
    rbf,
)


# An Adam step asks, for a few candidates x_b and differentiably in x, for the mean UCB over the
# centre's contexts c_j (weights w_j) and, in WDRBO, L(x_b) = max_m ||grad_c UCB(x_b, c_m)|| over
# M Lipschitz points. The arithmetic is small (a few M multiply-adds at n = 99) but torch takes
# it in dozens of calls at several us each, forward and backward. Here one numba kernel (its
# products in BLAS) returns the values and their closed-form x-gradients.
#
# All context-side vectors (kc_j of the centre, kc_m and dkc_m/dc_d of the points) go through
# one numerical basis V [n, r] built once per acquisition: with a = V^T kc and
# B_b = (kx_b * V)^T K^{-1} (kx_b * V) [r, r], a posterior variance is 1 - a^T B_b a and
# dk^T K^{-1} k = da^T B_b a. Where the basis would not save work (about as many vectors as
# data: few points, or two context dimensions) the kernel takes V = I.
#
# The mean term: E_b = c0 + (kx_b * alpha) . u + beta sum_j w_j sigma_bj with u = sum_j w_j kc_j
# (exact). Its x-gradient, with g_bie = -(x_be - z_ie) / l_e^2 and c_bj = w_j / sigma_bj where
# the variance is above the floor (0 below it, as torch's clamp):
#     dE_b/dx_be = sum_i kx_bi g_bie (alpha_i u_i - beta Z_bi),
#     Z_bi = sum_j c_bj kc_ji (K^{-1} (kx_b * kc_j))_i = sum_q S_b[q, i] (V G_b)[i, q],
# where S_b = (kx_b * V)^T K^{-1} and G_b = sum_j c_bj a_j a_j^T. L(x) and its x-gradient at each
# candidate's first maximiser (torch's argmax) follow `gp.context_gradient_jacobian` (its
# docstring derives them). numba is imported only here, when an acquisition first takes this route.
class CompiledUCB:
    """x [b, d_x] -> E(x) - radius * L(x) [b], differentiable in x (L's gradient left out when
    `detach_lipschitz`): the kernel's arguments but the candidates, as C-contiguous float64
    arrays, built once per acquisition (`build`)."""

    def __init__(self, arguments: tuple, radius: float, detach_lipschitz: bool, identity: bool) -> None:
        self.arguments = arguments
        self.radius = radius
        self.detach_lipschitz = detach_lipschitz
        self.identity = identity  # V = I, not the vectors' numerical basis (also among the arguments)

    @classmethod
    def build(cls, model: GaussianProcess, nodes: Tensor, weights: Tensor, points: Tensor | None, beta: float,
              radius: float = 0.0, detach_lipschitz: bool = False,
              features: ContextFeatures | None = None) -> "CompiledUCB | None":
        """None off the CPU or float64. `points` None: no L term (ERBO). The basis is taken where
        it needs fewer multiply-adds per candidate (S_b, B_b, their products with the vectors'
        coefficients) than V = I. `features`: the GP's context features of the same nodes and
        points, whose vectors and numerical basis are the ones this would compute (the same
        arithmetic on the same inputs), so they are not computed twice."""
        tensors = [model.train_x, nodes, weights] + ([] if points is None else [points])
        if any(t.device.type != "cpu" or t.dtype != torch.float64 for t in tensors):
            return None
        dim_c = nodes.shape[-1]
        n, n_nodes = model.n, nodes.shape[0]
        if points is None:
            points = nodes.new_empty(0, dim_c)
        if features is not None:
            rows = features.mean.T  # [N + M + M d_c, n]: rbf's and context_gradient_vectors' bits, as below
        else:
            centre = rbf(nodes, model.train_x[:, -dim_c:], model.lengthscale[-dim_c:])  # [N, n]
            rows = torch.cat([centre, model.context_gradient_vectors(points).reshape(-1, n)])
        centre, gradient_vectors = rows[:n_nodes], rows[n_nodes:].view(1 + dim_c, points.shape[0], n)  # [1 + d_c, M, n]
        basis = features.span if features is not None and features.span is not None else None
        if basis is None:
            basis, _ = numerical_basis(rows, model.basis_tolerance)
        identity = _identity_is_cheaper(n, basis.shape[1], centre.shape[0] + points.shape[0])
        if identity:
            basis = basis.new_empty(n, 0)
            centre_coefficients, coefficients = centre, gradient_vectors
        else:
            centre_coefficients, coefficients = centre @ basis, gradient_vectors @ basis
        arrays = (
            model.train_x, model.lengthscale, model.inverse, model.weights, float(model.mean_constant), float(beta),
            basis, identity, centre_coefficients, weights, weights @ centre,  # u = sum_j w_j kc_j, exact
            points, coefficients,  # [1 + d_c, M, r]: a_m, then da_md
            gradient_vectors[1:].reshape(-1, n).T,  # [n, d_c M]: dkc_m / dc_d in column d M + m (exact)
        )
        return cls(_host_arrays(arrays), float(radius), detach_lipschitz, identity)

    def __call__(self, x: Tensor) -> Tensor:
        return _CompiledValue.apply(x, self)

    def value_and_gradient(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(value [b], its x-gradient [b, d_x]; L's part left out when `detach_lipschitz`)."""
        mean, d_mean, norm, d_norm = _acquisition_terms(np.ascontiguousarray(x.detach().numpy()), *self.arguments)
        if self.radius:
            value = mean - self.radius * norm
            if not self.detach_lipschitz:
                d_mean = d_mean - self.radius * d_norm
        else:
            value = mean
        return torch.from_numpy(value), torch.from_numpy(d_mean)


class CompiledPairs:
    """x [b, d_x] -> the UCB at every pair (x_b, c_j) [b, N] of fixed contexts c_j, differentiable
    in x through one kernel each way: the forward pass returns the values, the backward pass
    takes d(loss)/du [b, N] (any function of the values, as DRBO-KDE's sorted-weight sum or the
    minimax's closed form) and returns d(loss)/dx. It is the mean-term kernel's arithmetic with a
    weight per pair, w_bj = d(loss)/du_bj, in place of one per context: G_b = sum_j w_bj/sigma_bj
    a_j a_j^T and u_b = sum_j w_bj kc_j (the module's docstring)."""

    def __init__(self, arguments: tuple, identity: bool, sparse_backward: bool = False) -> None:
        self.arguments = arguments  # train, lengthscale, K^{-1}, alpha, constant mean, beta, V, identity, a [N, r], kc [N, n]
        self.identity = identity
        # The backward pass leaves out the contexts whose weight is zero for every candidate
        # (terms of zero; the sums over the others change order, so a records change).
        self.sparse_backward = sparse_backward

    @classmethod
    def build(cls, model: GaussianProcess, contexts: Tensor, beta: float,
              features: ContextFeatures | None = None, sparse_backward: bool = False) -> "CompiledPairs | None":
        """None off the CPU or float64; V = I where the basis saves no work (the same rule).
        `features`: the GP's context features of the same contexts (no gradient contexts), whose
        vectors and, on the basis route, basis are the ones this would compute (the same
        arithmetic on the same inputs), so they are not computed twice."""
        if any(t.device.type != "cpu" or t.dtype != torch.float64 for t in (model.train_x, contexts)):
            return None
        dim_c, n = contexts.shape[-1], model.n
        shared = features is not None and features.n_gradient == 0
        if shared:
            vectors = features.mean.T.contiguous()  # [N, n]: rbf's bits, as below
        else:
            vectors = rbf(contexts, model.train_x[:, -dim_c:], model.lengthscale[-dim_c:])  # [N, n]
        if shared and features.span is not None:
            basis = features.span  # numerical_basis(vectors)'s V
        else:
            basis, _ = numerical_basis(vectors, model.basis_tolerance)
        identity = _identity_is_cheaper(n, basis.shape[1], vectors.shape[0])
        if identity:
            basis, coefficients = basis.new_empty(n, 0), vectors
        else:
            coefficients = vectors @ basis
        arrays = (model.train_x, model.lengthscale, model.inverse, model.weights, float(model.mean_constant),
                  float(beta), basis, identity, coefficients, vectors)
        return cls(_host_arrays(arrays), identity, sparse_backward)

    def __call__(self, x: Tensor) -> Tensor:
        return _CompiledPairValues.apply(x, self)

    def values(self, x: Tensor) -> tuple[Tensor, tuple]:
        """The UCB [b, N] without autograd, and what `gradient` needs of this pass."""
        host_x = np.ascontiguousarray(x.detach().numpy())
        values, inverse_sigma, kx, solved = _pair_values(host_x, *self.arguments)
        return torch.from_numpy(values), (host_x, inverse_sigma, kx, solved)

    def gradient(self, kept: tuple, weights: Tensor) -> Tensor:
        """d(sum_bj weights_bj u_bj)/dx [b, d_x] at the pass `kept` (from `values`): the backward
        pass for d(loss)/du = weights."""
        host_x, inverse_sigma, kx, solved = kept
        train, lengthscale, _, alpha, _, beta, basis, identity, coefficients, vectors = self.arguments
        host_weights = np.ascontiguousarray(weights.detach().numpy())
        used = np.flatnonzero(host_weights.any(axis=0)) if self.sparse_backward else None
        if used is not None and used.size < host_weights.shape[1]:
            coefficients, vectors = coefficients[used], vectors[used]
            inverse_sigma, host_weights = (np.ascontiguousarray(inverse_sigma[:, used]),
                                           np.ascontiguousarray(host_weights[:, used]))
        return torch.from_numpy(_pair_gradient(host_x, train, lengthscale, alpha, beta, basis, identity,
                                               coefficients, vectors, kx, solved, inverse_sigma, host_weights))


class CompiledFreshPairs:
    """(x [b, d_x], contexts [N, d_c]) -> the UCB at every pair [b, N], without gradient, for
    contexts drawn afresh at every call (StableOpt's box, DRBO-KDE's m(x)): the pair kernel's
    forward pass, the contexts' vectors projected onto `region` (a `GaussianProcess.region_basis`
    of their box, built once) where that basis saves work and spans them, else V = I."""

    def __init__(self, model: GaussianProcess, beta: float, region: Region | None, polynomial_exp: bool = False) -> None:
        self.arguments = _host_arrays((model.train_x, model.lengthscale, model.inverse, model.weights,
                                       float(model.mean_constant), float(beta)))
        self.region = None if region is None else _host_arrays((region.basis,))[0]
        self.residual_max = REGION_RESIDUAL_MAX if region is None else region.residual_max
        self.n = model.n
        self.polynomial_exp = polynomial_exp  # the contexts' vectors by `exp_in_place`, not libm's exp

    @classmethod
    def build(cls, model: GaussianProcess, beta: float, region: Region | None,
              polynomial_exp: bool = False) -> "CompiledFreshPairs | None":
        """None off the CPU or float64."""
        if model.train_x.device.type != "cpu" or model.train_x.dtype != torch.float64:
            return None
        return cls(model, beta, region, polynomial_exp)

    def __call__(self, x: Tensor, contexts: Tensor) -> Tensor:
        host_x = np.ascontiguousarray(x.detach().numpy())
        host_contexts = np.ascontiguousarray(contexts.detach().numpy())
        values = _fresh_pair_values(host_x, host_contexts, *self.arguments, self.region_for(contexts.shape[0]),
                                    self.residual_max, self.polynomial_exp)
        return torch.from_numpy(values)

    def minimum(self, x: Tensor, contexts: Tensor) -> Tensor:
        """min_j u(x_b, c_j) [b], differentiable in x: the gradient is that of each candidate's UCB
        at its first minimising context (torch.min's choice), by the pair kernel's backward
        arithmetic over those b contexts only."""
        return _CompiledFreshMinimum.apply(x, contexts, self)

    def minimum_values(self, x: Tensor, contexts: Tensor) -> tuple[Tensor, tuple]:
        """`minimum`'s values [b] without autograd, and what `minimum_gradient` needs of this pass:
        each candidate's minimising context's coefficients, vector and 1/sigma."""
        host_x = np.ascontiguousarray(x.detach().numpy())
        train, lengthscale, inverse, alpha, mean_constant, beta = self.arguments
        region = self.region_for(contexts.shape[0])
        coefficients, vectors, identity = _fresh_vectors(np.ascontiguousarray(contexts.detach().numpy()), train,
                                                         lengthscale, region, self.residual_max, self.polynomial_exp)
        values, inverse_sigma, kx, solved = _pair_values(host_x, train, lengthscale, inverse, alpha, mean_constant,
                                                         beta, region, identity, coefficients, vectors)
        index = values.argmin(axis=1)  # the first minimiser, as torch.min
        rows = np.arange(index.size)
        kept = (host_x, region, identity, coefficients[index], vectors[index], np.diag(inverse_sigma[rows, index]),
                kx, solved)
        return torch.from_numpy(values[rows, index]), kept

    def minimum_gradient(self, kept: tuple, weights: Tensor) -> Tensor:
        """d(sum_b weights_b min_j u_bj)/dx [b, d_x] at the pass `kept` (from `minimum_values`)."""
        host_x, region, identity, coefficients, vectors, inverse_sigma, kx, solved = kept
        train, lengthscale, _, alpha, _, beta = self.arguments
        host_weights = np.diag(np.ascontiguousarray(weights.detach().numpy()))  # candidate b: its own context
        return torch.from_numpy(_pair_gradient(host_x, train, lengthscale, alpha, beta, region, identity,
                                               coefficients, vectors, kx, solved, inverse_sigma, host_weights))

    def region_for(self, contexts: int) -> np.ndarray:
        """The region basis, or an [n, 0] array (V = I) where the basis saves no work."""
        rank = 0 if self.region is None else self.region.shape[1]
        return np.empty((self.n, 0)) if _identity_is_cheaper(self.n, rank, contexts) else self.region


class CompiledPosteriorUCB:
    """x [b, d] -> mu(x) + beta sigma(x) [b] on a GP over x alone (GP-UCB), differentiable in x:
    one kernel gives the values and their closed-form gradients (d mu = sum_i dk_i alpha_i,
    d sigma = -sum_i dk_i (K^{-1} k)_i / sigma) where torch's autograd runs ~25 small operations
    each way. The variance is 1 - ||L^{-1} k||^2 with L^{-1}, the Cholesky factor's inverse,
    formed once per acquisition: as accurate as torch's triangular solve, in two small products."""

    def __init__(self, arguments: tuple) -> None:
        self.arguments = arguments  # train, lengthscale, L^{-1}, alpha, constant mean, beta

    @classmethod
    def build(cls, model: GaussianProcess, beta: float) -> "CompiledPosteriorUCB | None":
        """None off the CPU or float64."""
        if model.train_x.device.type != "cpu" or model.train_x.dtype != torch.float64:
            return None
        factor = model.cholesky_factor
        inverse_factor = torch.linalg.solve_triangular(factor, torch.eye(model.n, dtype=factor.dtype), upper=False)
        return cls(_host_arrays((model.train_x, model.lengthscale, inverse_factor, model.weights,
                                 float(model.mean_constant), float(beta))))

    def __call__(self, x: Tensor) -> Tensor:
        return _CompiledValue.apply(x, self)

    def value_and_gradient(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(value [b], its x-gradient [b, d])."""
        values, gradient = _posterior_ucb(np.ascontiguousarray(x.detach().numpy()), *self.arguments, VARIANCE_FLOOR)
        return torch.from_numpy(values), torch.from_numpy(gradient)


def _identity_is_cheaper(n: int, rank: int, used: int) -> bool:
    """Whether V = I needs no more multiply-adds per candidate than a basis of `rank` columns
    ([n, n] forms against S_b, B_b and their products with `used` coefficient rows)."""
    return rank == 0 or n * n * rank + (2 * n + used) * rank * rank >= (used + 1) * n * n


def _host_arrays(values: tuple) -> tuple:
    """The kernel's arguments: tensors (CPU float64 here) as C-contiguous NumPy arrays."""
    arrays = []
    for value in values:  # (a loop, not a generator: the host move is this function's)
        arrays.append(value if isinstance(value, (bool, float)) else np.ascontiguousarray(value.numpy()))
    return tuple(arrays)


class _CompiledValue(torch.autograd.Function):
    """The forward pass computes the value and its x-gradient; the backward pass scales it."""

    @staticmethod
    def forward(ctx, x: Tensor, acquisition: CompiledUCB) -> Tensor:  # type: ignore[override]
        value, jacobian = acquisition.value_and_gradient(x)
        ctx.save_for_backward(jacobian)
        return value

    @staticmethod
    def backward(ctx, grad_value: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        (jacobian,) = ctx.saved_tensors
        return grad_value.unsqueeze(-1) * jacobian, None


class _CompiledPairValues(torch.autograd.Function):
    """The forward pass keeps what the backward pass's kernel needs: kx, S_b and 1/sigma."""

    @staticmethod
    def forward(ctx, x: Tensor, pairs: CompiledPairs) -> Tensor:  # type: ignore[override]
        values, ctx.kept = pairs.values(x)
        ctx.pairs = pairs
        return values

    @staticmethod
    def backward(ctx, grad_values: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        return ctx.pairs.gradient(ctx.kept, grad_values), None


class _CompiledFreshMinimum(torch.autograd.Function):
    """The forward pass keeps, for each candidate, its minimising context's coefficients, vector
    and 1/sigma; the backward pass is `_pair_gradient` with one weight per candidate."""

    @staticmethod
    def forward(ctx, x: Tensor, contexts: Tensor, pairs: CompiledFreshPairs) -> Tensor:  # type: ignore[override]
        values, ctx.kept = pairs.minimum_values(x, contexts)
        ctx.pairs = pairs
        return values

    @staticmethod
    def backward(ctx, grad_value: Tensor) -> tuple[Tensor, None, None]:  # type: ignore[override]
        return ctx.pairs.minimum_gradient(ctx.kept, grad_value), None, None


@njit(cache=True)
def _acquisition_terms(x, train, lengthscale, inverse, alpha, mean_constant, beta, basis, identity,  # type: ignore[no-untyped-def]
                       centre_coefficients, centre_weights, centre_mean, points, coefficients, derivatives):
    """(E [b], dE/dx [b, d_x], L [b], dL/dx [b, d_x]); L = 0 without points. `identity`: V = I
    (`basis` unused, the coefficients are the vectors themselves)."""
    b, dim_x = x.shape
    n, dim = train.shape
    dim_c = dim - dim_x
    r = n if identity else basis.shape[1]
    n_centre, m_points = centre_coefficients.shape[0], points.shape[0]
    inverse_l2 = 1.0 / (lengthscale * lengthscale)
    kx, solved, forms = _candidate_forms(x, train, inverse_l2, inverse, basis, identity)
    weighted_alpha = np.empty((b, n))
    for j in range(b):
        for i in range(n):
            weighted_alpha[j, i] = kx[j, i] * alpha[i]

    # The mean term over the centre's contexts.
    weight_sum = 0.0
    for c in range(n_centre):
        weight_sum += centre_weights[c]
    centre_products = centre_coefficients @ forms  # [N, b r]: (B_b a_j)^T
    scaled_coefficients = np.empty((n_centre, b * r))  # c_bj a_j, side by side
    mean = np.empty(b)
    for j in range(b):
        col = j * r
        spread = 0.0
        for c in range(n_centre):
            quad = 0.0
            for q in range(r):
                quad += centre_products[c, col + q] * centre_coefficients[c, q]
            variance = 1.0 - quad
            sigma = np.sqrt(max(variance, VARIANCE_FLOOR))
            spread += centre_weights[c] * sigma
            factor = centre_weights[c] / sigma if variance > VARIANCE_FLOOR else 0.0
            for q in range(r):
                scaled_coefficients[c, col + q] = factor * centre_coefficients[c, q]
        level = 0.0
        for i in range(n):
            level += weighted_alpha[j, i] * centre_mean[i]
        mean[j] = mean_constant * weight_sum + level + beta * spread
    levels = np.empty((b, n))  # u, the same for every candidate
    for j in range(b):
        levels[j] = centre_mean
    d_mean = _mean_term_gradient(x, train, inverse_l2, alpha, beta, basis, identity, kx, solved,
                                 centre_coefficients.T @ scaled_coefficients, levels)

    norm = np.zeros(b)
    jacobian = np.zeros((b, dim_x))
    if m_points == 0:
        return mean, d_mean, norm, jacobian
    # L(x): the norms at every point and each candidate's first maximiser.
    d_point_mean = weighted_alpha @ derivatives  # [b, d_c M]
    a = coefficients[0]  # [M, r]
    products = a @ forms  # [M, b r]: (B_b a_m)^T
    best = np.empty(b, np.int64)
    for j in range(b):
        col = j * r
        top, arg = -1.0, 0
        for m in range(m_points):
            quad = 0.0
            for q in range(r):
                quad += products[m, col + q] * a[m, q]
            sigma = np.sqrt(max(1.0 - quad, VARIANCE_FLOOR))
            norm2 = 0.0
            for d in range(dim_c):
                numerator = 0.0
                for q in range(r):
                    numerator += products[m, col + q] * coefficients[1 + d, m, q]
                g = d_point_mean[j, d * m_points + m] - beta * numerator / sigma
                norm2 += g * g
            if norm2 > top:
                top, arg = norm2, m
        best[j] = arg
    # At z_b = [x_b, c_best]: k, and the columns k, dk/dx_e for one product with K^{-1}.
    width = 1 + dim_x
    scaled = np.empty((b, n, dim))  # (z - z_i) / l^2
    columns = np.empty((n, b * width))
    for j in range(b):
        for i in range(n):
            s = 0.0
            for e in range(dim):
                z = x[j, e] if e < dim_x else points[best[j], e - dim_x]
                offset = z - train[i, e]
                scaled[j, i, e] = offset * inverse_l2[e]
                s += offset * offset * inverse_l2[e]
            k = np.exp(-0.5 * s)
            columns[i, j * width] = k
            for e in range(dim_x):
                columns[i, j * width + 1 + e] = -k * scaled[j, i, e]
    inverse_columns = inverse @ columns  # w = K^{-1} k, K^{-1} dk_x
    numerator = np.empty(dim_c)
    gradient = np.empty(dim_c)
    d_k_c = np.empty((n, dim_c))
    for j in range(b):
        col = j * width
        var = 1.0
        for i in range(n):
            var -= inverse_columns[i, col] * columns[i, col]
        sigma = np.sqrt(max(var, VARIANCE_FLOOR))
        for d in range(dim_c):
            nu, mu = 0.0, 0.0
            for i in range(n):
                d_k_c[i, d] = -columns[i, col] * scaled[j, i, dim_x + d]
                nu += d_k_c[i, d] * inverse_columns[i, col]
                mu += d_k_c[i, d] * alpha[i]
            numerator[d] = nu
            gradient[d] = mu - beta * nu / sigma
        total = 0.0
        for d in range(dim_c):
            total += gradient[d] * gradient[d]
        norm[j] = np.sqrt(total)
        if norm[j] == 0.0:
            continue
        for e in range(dim_x):
            d_sigma = 0.0
            if var > VARIANCE_FLOOR:
                for i in range(n):
                    d_sigma += columns[i, col + 1 + e] * inverse_columns[i, col]
                d_sigma = -d_sigma / sigma
            dot = 0.0
            for d in range(dim_c):
                acc = beta / (sigma * sigma) * numerator[d] * d_sigma
                for i in range(n):
                    inner = (-scaled[j, i, e] * (alpha[i] - beta * inverse_columns[i, col] / sigma)
                             - beta / sigma * inverse_columns[i, col + 1 + e])
                    acc += d_k_c[i, d] * inner
                dot += gradient[d] * acc
            jacobian[j, e] = dot / norm[j]
    return mean, d_mean, norm, jacobian


@njit(cache=True)
def _decision_kernel(x, train, inverse_l2):  # type: ignore[no-untyped-def]
    """kx [b, n] = exp(-sum_e (x_be - z_ie)^2 / (2 l_e^2)) over the decision coordinates of x [b, d_x]."""
    b, dim_x = x.shape
    n = train.shape[0]
    kx = np.empty((b, n))
    for j in range(b):
        for i in range(n):
            s = 0.0
            for e in range(dim_x):
                t = x[j, e] - train[i, e]
                s += t * t * inverse_l2[e]
            kx[j, i] = np.exp(-0.5 * s)
    return kx


@njit(cache=True)
def _posterior_ucb(x, train, lengthscale, inverse_factor, alpha, mean_constant, beta, floor):  # type: ignore[no-untyped-def]
    """(mu + beta sigma [b], its x-gradient [b, d]) at x [b, d]; sigma's gradient is 0 where the
    variance is at the floor (torch's clamp)."""
    b, dim = x.shape
    n = train.shape[0]
    inverse_l2 = 1.0 / (lengthscale * lengthscale)
    k = _decision_kernel(x, train, inverse_l2)
    whitened = k @ inverse_factor.T  # rows (L^{-1} k_b)^T
    solved = whitened @ inverse_factor  # rows (K^{-1} k_b)^T
    values = np.empty(b)
    gradient = np.zeros((b, dim))
    for j in range(b):
        mean = 0.0
        quad = 0.0
        for i in range(n):
            mean += k[j, i] * alpha[i]
            quad += whitened[j, i] * whitened[j, i]
        variance = 1.0 - quad
        sigma = np.sqrt(max(variance, floor))
        values[j] = mean_constant + mean + beta * sigma
        scale = beta / sigma if variance > floor else 0.0
        for i in range(n):
            weight = k[j, i] * (alpha[i] - scale * solved[j, i])
            for e in range(dim):
                gradient[j, e] -= weight * (x[j, e] - train[i, e]) * inverse_l2[e]
    return values, gradient


@njit(cache=True)
def _candidate_forms(x, train, inverse_l2, inverse, basis, identity):  # type: ignore[no-untyped-def]
    """(kx [b, n], S_b = (kx_b * V)^T K^{-1} stacked [b r, n], the forms B_b = S_b (kx_b * V)
    side by side [r, b r]) for the candidates x [b, d_x] (V = I where `identity`)."""
    b, dim_x = x.shape
    n = train.shape[0]
    r = n if identity else basis.shape[1]
    kx = _decision_kernel(x, train, inverse_l2)
    forms = np.empty((r, b * r))
    if identity:
        solved = np.empty((b * r, n))
        for j in range(b):
            for p in range(n):
                for q in range(n):
                    solved[j * r + p, q] = kx[j, p] * inverse[p, q]
                    forms[p, j * r + q] = solved[j * r + p, q] * kx[j, q]
    else:
        weighted_basis = np.empty((b * r, n))
        for j in range(b):
            for i in range(n):
                for q in range(r):
                    weighted_basis[j * r + q, i] = kx[j, i] * basis[i, q]
        solved = weighted_basis @ inverse  # K^{-1} symmetric
        for j in range(b):
            forms[:, j * r:(j + 1) * r] = solved[j * r:(j + 1) * r] @ weighted_basis[j * r:(j + 1) * r].T
    return kx, solved, forms


@njit(cache=True)
def _pair_values(x, train, lengthscale, inverse, alpha, mean_constant, beta, basis, identity,  # type: ignore[no-untyped-def]
                 coefficients, vectors):
    """(u [b, N], 1/sigma [b, N] (0 where the variance is at the floor), kx, S_b stacked)."""
    b = x.shape[0]
    n_contexts = vectors.shape[0]
    r = train.shape[0] if identity else basis.shape[1]
    inverse_l2 = 1.0 / (lengthscale * lengthscale)
    kx, solved, forms = _candidate_forms(x, train, inverse_l2, inverse, basis, identity)
    weighted_alpha = np.empty_like(kx)
    for j in range(b):
        for i in range(train.shape[0]):
            weighted_alpha[j, i] = kx[j, i] * alpha[i]
    means = weighted_alpha @ vectors.T  # [b, N]
    products = coefficients @ forms  # [N, b r]: (B_b a_j)^T
    values = np.empty((b, n_contexts))
    inverse_sigma = np.empty((b, n_contexts))
    for j in range(b):
        col = j * r
        for c in range(n_contexts):
            quad = 0.0
            for q in range(r):
                quad += products[c, col + q] * coefficients[c, q]
            variance = 1.0 - quad
            sigma = np.sqrt(max(variance, VARIANCE_FLOOR))
            values[j, c] = mean_constant + means[j, c] + beta * sigma
            inverse_sigma[j, c] = 1.0 / sigma if variance > VARIANCE_FLOOR else 0.0
    return values, inverse_sigma, kx, solved


@njit(cache=True)
def _pair_gradient(x, train, lengthscale, alpha, beta, basis, identity, coefficients, vectors,  # type: ignore[no-untyped-def]
                   kx, solved, inverse_sigma, weights):
    """d/dx_b of sum_j w_bj u_bj [b, d_x] for the pair weights w [b, N]."""
    b, dim_x = x.shape
    n = train.shape[0]
    n_contexts = vectors.shape[0]
    r = n if identity else basis.shape[1]
    inverse_l2 = 1.0 / (lengthscale * lengthscale)
    levels = weights @ vectors  # [b, n]: sum_j w_bj kc_j
    scaled_coefficients = np.empty((n_contexts, b * r))  # (w_bj / sigma_bj) a_j, side by side
    for j in range(b):
        col = j * r
        for c in range(n_contexts):
            factor = weights[j, c] * inverse_sigma[j, c]
            for q in range(r):
                scaled_coefficients[c, col + q] = factor * coefficients[c, q]
    return _mean_term_gradient(x, train, inverse_l2, alpha, beta, basis, identity, kx, solved,
                               coefficients.T @ scaled_coefficients, levels)


@njit(cache=True)
def _mean_term_gradient(x, train, inverse_l2, alpha, beta, basis, identity, kx, solved, grams, levels):  # type: ignore[no-untyped-def]
    """d/dx_b of sum_j w_bj UCB(x_b, c_j) [b, d_x] from G_b side by side (`grams` [r, b r]) and
    u_b = sum_j w_bj kc_j (`levels` [b, n]): sum_i kx_bi g_bie (alpha_i u_bi - beta Z_bi)."""
    b, dim_x = x.shape
    n = train.shape[0]
    r = n if identity else basis.shape[1]
    if not identity:
        grams = basis @ grams  # V G_b
    gradient = np.zeros((b, dim_x))
    for j in range(b):
        col = j * r
        for i in range(n):
            z = 0.0
            for q in range(r):
                z += solved[col + q, i] * grams[i, col + q]
            weight = kx[j, i] * (alpha[i] * levels[j, i] - beta * z)
            for e in range(dim_x):
                gradient[j, e] -= weight * (x[j, e] - train[i, e]) * inverse_l2[e]
    return gradient


@njit(cache=True)
def _fresh_vectors(contexts, train, lengthscale, region, residual_max, polynomial_exp):  # type: ignore[no-untyped-def]
    """(coefficients, vectors kc [N, n], identity) for contexts [N, d_c] seen once: kc projected
    onto `region` [n, r] (r > 0) where every vector lies within `residual_max` of its span, else
    V = I (the coefficients are then the vectors). `polynomial_exp`: the exponentials by
    `exp_in_place` (within 1 ulp of libm's, about 3x faster here), else libm's."""
    n, dim = train.shape
    n_contexts, dim_c = contexts.shape
    dim_x = dim - dim_c
    inverse_l2 = 1.0 / (lengthscale * lengthscale)
    train_c = np.empty((dim_c, n))  # the training contexts by dimension: the loops over i vectorise
    for d in range(dim_c):
        for i in range(n):
            train_c[d, i] = train[i, dim_x + d]
    vectors = np.zeros((n_contexts, n))
    for c in range(n_contexts):
        row = vectors[c]  # sum_d (c_d - z_id)^2 / l_d^2, from 0 in d's order: the same sums, per i
        for d in range(dim_c):
            point, weight, column = contexts[c, d], inverse_l2[dim_x + d], train_c[d]
            for i in range(n):
                t = point - column[i]
                row[i] += t * t * weight
        for i in range(n):
            row[i] = -0.5 * row[i] if polynomial_exp else np.exp(-0.5 * row[i])
    if polynomial_exp:
        exp_in_place(vectors.reshape(-1))
    if region.shape[1] > 0:
        coefficients = vectors @ region
        if _within(vectors, coefficients @ region.T, residual_max):
            return coefficients, vectors, False
    return vectors, vectors, True


@njit(cache=True)
def _within(vectors, spanned, residual_max):  # type: ignore[no-untyped-def]
    """Whether every |vectors - spanned| <= residual_max (False at a NaN), without the residual array."""
    rows, columns = vectors.shape
    for c in range(rows):
        for i in range(columns):
            if not abs(vectors[c, i] - spanned[c, i]) <= residual_max:
                return False
    return True


@njit(cache=True)
def _fresh_pair_values(x, contexts, train, lengthscale, inverse, alpha, mean_constant, beta,  # type: ignore[no-untyped-def]
                       region, residual_max, polynomial_exp):
    """u [b, N] for contexts [N, d_c] seen once (`_fresh_vectors`)."""
    coefficients, vectors, identity = _fresh_vectors(contexts, train, lengthscale, region, residual_max,
                                                     polynomial_exp)
    return _pair_values(x, train, lengthscale, inverse, alpha, mean_constant, beta, region, identity,
                        coefficients, vectors)[0]


# exp_in_place's constants: ln 2 in two parts (the high one's trailing bits zero, so k ln2_hi is
# exact for the k that occur), and 1.5 * 2^52, whose addition rounds to an integer k.
_INVERSE_LN2 = 1.4426950408889634
_LN2_HIGH = 6.93147180369123816490e-01
_LN2_LOW = 1.90821492927058770002e-10
_ROUNDING_SHIFT = 6755399441055744.0
_ROUNDING_SHIFT_BITS = np.int64(0x4338000000000000)  # its bits
_EXP_SMALLEST = -708.0  # below it exp_in_place returns 0 (libm's value there is below 3.3e-308)


@njit(cache=True)
def exp_in_place(values):  # type: ignore[no-untyped-def]
    """values <- exp(values) for a 1-d float64 array of finite values <= 0, within 1 ulp of libm's exp
    (tests/models/test_compiled_exp.py) in loops the compiler vectorises (libm's is one call a
    value): x = k ln2 + r with k = round(x / ln2) and |r| <= ln2 / 2, e^r by its Taylor
    polynomial of degree 13 (truncation below 1e-17 relative), times 2^k built in the exponent
    bits. Plain IEEE operations in a fixed order (no fused multiply-adds: numba's default), so
    the same bits on every x86 CPU."""
    size = values.size
    shifted = np.empty(size)
    for i in range(size):
        x = max(values[i], _EXP_SMALLEST)
        rounded = x * _INVERSE_LN2 + _ROUNDING_SHIFT
        k = rounded - _ROUNDING_SHIFT
        r = (x - k * _LN2_HIGH) - k * _LN2_LOW
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        p = p * r + 1.0
        shifted[i] = rounded
        values[i] = p if values[i] >= _EXP_SMALLEST else 0.0
    exponents = shifted.view(np.int64)  # the low bits of k + 1.5 * 2^52 hold k
    for i in range(size):
        exponents[i] = (exponents[i] - _ROUNDING_SHIFT_BITS + 1023) << 52
    scales = exponents.view(np.float64)  # 2^k
    for i in range(size):
        values[i] = values[i] * scales[i]


@njit(cache=True)
def variances_in_place(quad, floor):  # type: ignore[no-untyped-def]
    """quad <- max(1 - quad, floor), elementwise, as torch's rsub and clamp_min compute it (each
    correctly rounded, so the same bits; NaN stays NaN)."""
    rows, columns = quad.shape
    for i in range(rows):
        for j in range(columns):
            variance = 1.0 - quad[i, j]
            quad[i, j] = floor if variance < floor else variance


@njit(cache=True)
def ucb_from_sigma(out, mean, sigma, mean_constant, beta):  # type: ignore[no-untyped-def]
    """out = (mean_constant + mean) + beta * sigma, elementwise, in torch's order (the same bits)."""
    rows, columns = out.shape
    for i in range(rows):
        for j in range(columns):
            out[i, j] = (mean_constant + mean[i, j]) + beta * sigma[i, j]
