"""Two elementwise passes of the GP's values without autograd, compiled: the variance from the
quadratic term, and the UCB from sigma, each in torch's order (the same bits). numba is
imported only here, when `PairRoutes._ucb_without_gradient` first runs."""

from __future__ import annotations

from numba import njit


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
