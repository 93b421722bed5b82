"""The GP's MAP objective, -(log N(y | m, K + s2 I) + log priors) / n, and its analytic gradient
in two numba kernels around LAPACK, for the ~50 evaluations of one L-BFGS-B fit.

In NumPy an evaluation is ~20 small array calls (about 0.55 ms at n = 60, most of it call
overhead and the full [n, n, D] scaled differences); here the kernel matrix is built on one
triangle (n(n-1)/2 exponentials), K^{-1} comes from the Cholesky factor (dpotri) rather than a
triangular solve against I and a product, and the gradient's contraction reads one triangle,
3-5x cheaper (tests/models/test_compiled_fit.py holds it against NumPy's arithmetic). numba is
imported only here.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from scipy.linalg import lapack

from wdrbo_dist.models.map_objective import FAILED_OBJECTIVE, NOISE_PRIOR


class CompiledMapObjective:
    """theta = (lengthscales, noise variance, constant mean) -> (value, gradient) of
    -(log N(y | m, K + s2 I) + log priors) / n; FAILED_OBJECTIVE and a zero gradient where a
    parameter is not positive, K is not positive definite or a value is not finite."""

    def __init__(self, x: np.ndarray, y: np.ndarray, ls_prior: tuple[float, float]) -> None:
        self.x = np.ascontiguousarray(x, dtype=np.float64)
        self.y = np.ascontiguousarray(y, dtype=np.float64)
        self.priors = (*ls_prior, *NOISE_PRIOR)
        self.const = 0.5 * self.x.shape[0] * math.log(2.0 * math.pi)

    def __call__(self, theta: np.ndarray) -> tuple[float, np.ndarray]:
        failed = (FAILED_OBJECTIVE, np.zeros_like(theta))
        covariance = _covariance(self.x, theta)
        if covariance is None:
            return failed
        # The symmetric matrix as a column-major array (its transpose: no reordering copy); dpotrf
        # factors a copy, as `_terms` reads the RBF values of `covariance` again.
        chol, info = lapack.dpotrf(covariance.T, lower=1, clean=0)
        if info != 0:
            return failed
        inverse, info = lapack.dpotri(chol, lower=1)
        if info != 0:
            return failed
        value, gradient = _terms(self.x, self.y, theta, covariance, chol, inverse, self.const, *self.priors)
        if not math.isfinite(value) or not np.all(np.isfinite(gradient)):
            return failed
        return value, gradient


@njit(cache=True)
def _covariance(x, theta):  # type: ignore[no-untyped-def]
    """K + s2 I [n, n] for theta = (lengthscales, noise, mean); None for a lengthscale or noise <= 0."""
    n, dim = x.shape
    noise = theta[dim]
    if noise <= 0.0:
        return None
    inverse_l2 = np.empty(dim)
    for d in range(dim):
        if theta[d] <= 0.0:
            return None
        inverse_l2[d] = 1.0 / (theta[d] * theta[d])
    k = np.empty((n, n))
    for i in range(n):
        k[i, i] = 1.0 + noise
        for j in range(i):
            s = 0.0
            for d in range(dim):
                t = x[i, d] - x[j, d]
                s += t * t * inverse_l2[d]
            v = np.exp(-0.5 * s)
            k[i, j] = v
            k[j, i] = v
    return k


@njit(cache=True)
def _log_normal(v, loc, scale):  # type: ignore[no-untyped-def]
    """Log density of LogNormal(loc, scale) at v and its derivative."""
    lv = np.log(v)
    logp = -lv - np.log(scale * np.sqrt(2.0 * np.pi)) - (lv - loc) ** 2 / (2.0 * scale**2)
    return logp, -1.0 / v - (lv - loc) / (scale**2 * v)


@njit(cache=True)
def _terms(x, y, theta, covariance, chol, inverse, const, ls_loc, ls_scale, noise_loc, noise_scale):  # type: ignore[no-untyped-def]
    """(value, gradient) from K (off the diagonal: the RBF values), its Cholesky factor and the
    lower triangle of K^{-1}: nll = r^T a / 2 + log det L + const with a = K^{-1} r, r = y - m;
    d/dtheta = tr((K^{-1} - a a^T) dK/dtheta) / 2, dK_ij/dl_d = K_ij (x_id - x_jd)^2 / l_d^3."""
    n, dim = x.shape
    noise, mean = theta[dim], theta[dim + 1]
    residual = y - mean
    alpha = np.zeros(n)
    for i in range(n):
        for j in range(i + 1):
            alpha[i] += inverse[i, j] * residual[j]
        for j in range(i + 1, n):
            alpha[i] += inverse[j, i] * residual[j]
    nll = const
    alpha_sum = 0.0
    trace = 0.0
    for i in range(n):
        nll += 0.5 * residual[i] * alpha[i] + np.log(chol[i, i])
        alpha_sum += alpha[i]
        trace += inverse[i, i] - alpha[i] * alpha[i]
    contraction = np.zeros(dim)  # sum over i > j of (K^{-1} - a a^T)_ij K_ij (x_id - x_jd)^2 / l_d^2
    for i in range(n):
        for j in range(i):
            w = (inverse[i, j] - alpha[i] * alpha[j]) * covariance[i, j]
            for d in range(dim):
                t = x[i, d] - x[j, d]
                contraction[d] += w * t * t / (theta[d] * theta[d])
    value = nll
    gradient = np.empty(dim + 2)
    for d in range(dim):
        logp, dlogp = _log_normal(theta[d], ls_loc, ls_scale)
        value -= logp
        gradient[d] = (contraction[d] / theta[d] - dlogp) / n
    logp, dlogp = _log_normal(noise, noise_loc, noise_scale)
    value -= logp
    gradient[dim] = (0.5 * trace - dlogp) / n
    gradient[dim + 1] = -alpha_sum / n
    return value / n, gradient
