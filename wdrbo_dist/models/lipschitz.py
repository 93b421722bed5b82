"""WDRBO's L(x) for an Adam step in one compiled call (option `wdrbo_L_pass: compiled`).

An Adam step asks for L(x_b) = max_m ||grad_c UCB(x_b, c_m)|| over M fixed Lipschitz points
for a few candidates, differentiably in x. Its arithmetic is small (~3 M multiply-adds at
n = 99, M = 100) but torch or NumPy take it in dozens of calls at several us each, which made
WDRBO's Adam step ~1.8x ERBO's. Here one numba kernel (its products in BLAS) takes the norms
at every point, each candidate's argmax and the closed-form x-gradient at it, the formula of
`gp.context_gradient_jacobian` (its docstring derives it), in one call
(`benchmarks/lipschitz_gradient.py --step`).

The point side is the numerical basis V [n, r] of the points' kernel vectors kc_m and their
derivatives dkc_m/dc_d, built once per acquisition as `GaussianProcess.context_features` does:
with a_m = V^T kc_m, da_md = V^T dkc_md and B_b = (kx_b * V)^T K^{-1} (kx_b * V) [r, r],
sigma_bm^2 = 1 - a_m^T B_b a_m and dk^T K^{-1} k = da_md^T B_b a_m. Where the basis would not
save work (about as many vectors as data: few points, or two context dimensions) the kernel
takes V = I (since 0.12.0; before, WDRBO kept its shared pass there). numba is imported only
here, when a WDRBO acquisition first takes this route.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit
from torch import Tensor

from wdrbo_dist.models.gp import VARIANCE_FLOOR, GaussianProcess, numerical_basis


class CompiledLipschitz:
    """L(x) [b] at fixed Lipschitz points for one GP and beta, differentiable in x: the
    kernel's arguments but the candidates, as C-contiguous float64 arrays, built once per
    acquisition (`build`)."""

    def __init__(self, arguments: tuple) -> None:
        self.arguments = arguments  # (train, lengthscale, inverse, weights, beta, points, basis, coefficients, derivatives, identity)

    @classmethod
    def build(cls, model: GaussianProcess, points: Tensor, beta: float) -> "CompiledLipschitz | None":
        """None off the CPU. The kernel takes the points' numerical basis where it needs fewer
        multiply-adds per candidate (B_b [r, r] and its products with the M points'
        coefficients) than the identity (V = I: B_b = kx_b kx_b^T * K^{-1} [n, n], entry by
        entry, and its products): below ~20 points, or with two context dimensions, the
        vectors span about as many dimensions as the data."""
        if points.device.type != "cpu" or points.dtype != torch.float64:
            return None
        vectors = model.context_gradient_vectors(points)  # [1 + d_c, M, n]: kc_m, then dkc_m / dc_d
        n, m_points, rows = model.n, vectors.shape[1], vectors.shape[0] * vectors.shape[1]
        basis, _ = numerical_basis(vectors.reshape(rows, n))
        r = basis.shape[1]
        identity = r == 0 or n * n * r + n * r * r + m_points * r * r >= (m_points + 1) * n * n
        if identity:
            basis, coefficients = basis.new_empty(n, 0), vectors
        else:
            coefficients = vectors @ basis  # [1 + d_c, M, r]: a_m, then da_md
        arrays = (
            model.train_x, model.lengthscale, model.inverse, model.weights, float(beta), points, basis, coefficients,
            vectors[1:].reshape(-1, n).T,  # [n, d_c M]: dkc_m / dc_d in column d M + m (exact, for the mean)
        )
        return cls(tuple(a if isinstance(a, float) else np.ascontiguousarray(a.numpy()) for a in arrays) + (identity,))

    def __call__(self, x: Tensor) -> Tensor:
        return _LipschitzPenalty.apply(x, self.arguments)


class _LipschitzPenalty(torch.autograd.Function):
    """The forward pass computes L(x) and its Jacobian in x; the backward pass scales it."""

    @staticmethod
    def forward(ctx, x: Tensor, arguments: tuple) -> Tensor:  # type: ignore[override]
        norm, jacobian = _penalty_and_jacobian(np.ascontiguousarray(x.detach().numpy()), *arguments)
        ctx.save_for_backward(torch.from_numpy(jacobian))
        return torch.from_numpy(norm)

    @staticmethod
    def backward(ctx, grad_norm: Tensor) -> tuple[Tensor, None]:  # type: ignore[override]
        (jacobian,) = ctx.saved_tensors
        return grad_norm.unsqueeze(-1) * jacobian, None


@njit(cache=True)
def _penalty_and_jacobian(x, train, lengthscale, inverse, alpha, beta, points, basis, coefficients, derivatives,  # type: ignore[no-untyped-def]
                          identity):
    """(L [b], dL/dx [b, d_x]): the norms at every point, each candidate's first maximiser
    (torch's argmax), then the context gradient and its x-gradient there. `identity`: V = I
    (`basis` unused, the coefficients are the vectors themselves)."""
    b, dim_x = x.shape
    n, dim = train.shape
    dim_c = dim - dim_x
    m_points, r = coefficients.shape[1], coefficients.shape[2]
    inverse_l2 = 1.0 / (lengthscale * lengthscale)
    kx = np.empty((b, n))
    weighted_alpha = np.empty((b, n))
    for j in range(b):
        for i in range(n):
            s = 0.0
            for e in range(dim_x):
                t = x[j, e] - train[i, e]
                s += t * t * inverse_l2[e]
            kx[j, i] = np.exp(-0.5 * s)
            weighted_alpha[j, i] = kx[j, i] * alpha[i]
    # the candidates' forms B_b side by side, for one product with the points' coefficients
    forms = np.empty((r, b * r))
    if identity:
        for j in range(b):
            for p in range(n):
                for q in range(n):
                    forms[p, j * r + q] = kx[j, p] * inverse[p, q] * kx[j, q]
    else:  # W_b = kx_b * V, S_b = W_b^T K^{-1} (K^{-1} symmetric), B_b = S_b W_b
        weighted_basis = np.empty((b * r, n))
        for j in range(b):
            for i in range(n):
                for q in range(r):
                    weighted_basis[j * r + q, i] = kx[j, i] * basis[i, q]
        solved = weighted_basis @ inverse  # [b r, n]
        for j in range(b):
            forms[:, j * r:(j + 1) * r] = solved[j * r:(j + 1) * r] @ weighted_basis[j * r:(j + 1) * r].T
    d_mean = weighted_alpha @ derivatives  # [b, d_c M]
    a = coefficients[0]  # [M, r]
    products = a @ forms  # [M, b r]: (B_b a_m)^T in columns j r .. j r + r - 1
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
                g = d_mean[j, d * m_points + m] - beta * numerator / sigma
                norm2 += g * g
            if norm2 > top:
                top, arg = norm2, m
        best[j] = arg
    # at z_b = [x_b, c_best]: k, and the columns k, dk/dx_e for one product with K^{-1}
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
    norm = np.empty(b)
    jacobian = np.zeros((b, dim_x))
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
    return norm, jacobian
