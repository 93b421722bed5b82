"""The numba kernels of the compiled Adam step (compiled_ucb.py, compiled_pairs.py): the mean-term
UCB with WDRBO's L(x), the UCB at every (candidate, context) pair and its backward pass, the
contexts drawn afresh at every call, GP-UCB's posterior UCB, and a vectorisable exp.

They call one another, so they live in one file: numba's cache checks only the file of the
kernel it loads. The comment above `compiled_ucb.CompiledUCB` derives the gradients.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from wdrbo_dist.models.kernel import VARIANCE_FLOOR


@njit(cache=True)
def acquisition_terms(x, train, lengthscale, inverse, alpha, mean_constant, beta, basis, identity,  # type: ignore[no-untyped-def]
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
def posterior_ucb(x, train, lengthscale, inverse_factor, alpha, mean_constant, beta, floor):  # type: ignore[no-untyped-def]
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
def pair_values(x, train, lengthscale, inverse, alpha, mean_constant, beta, basis, identity,  # type: ignore[no-untyped-def]
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
def pair_gradient(x, train, lengthscale, alpha, beta, basis, identity, coefficients, vectors,  # type: ignore[no-untyped-def]
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
def fresh_vectors(contexts, train, lengthscale, region, residual_max):  # type: ignore[no-untyped-def]
    """(coefficients, vectors kc [N, n], identity) for contexts [N, d_c] seen once: kc projected
    onto `region` [n, r] (r > 0) where every vector lies within `residual_max` of its span, else
    V = I (the coefficients are then the vectors). The exponentials by `exp_in_place` (within
    1 ulp of libm's, about 3x faster here: ~100,000 a call at n = 99)."""
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
            row[i] = -0.5 * row[i]
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
def fresh_pair_values(x, contexts, train, lengthscale, inverse, alpha, mean_constant, beta,  # type: ignore[no-untyped-def]
                       region, residual_max):
    """u [b, N] for contexts [N, d_c] seen once (`fresh_vectors`)."""
    coefficients, vectors, identity = fresh_vectors(contexts, train, lengthscale, region, residual_max)
    return pair_values(x, train, lengthscale, inverse, alpha, mean_constant, beta, region, identity,
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
