"""The minimax closed form's Adam step after the UCB's reductions, compiled (paper profile).

`mmd_minimax.minimax_value_and_weights` forms the value and d(value)/du of a few candidates in
about 30 torch calls on [b] and [b, N] arrays, each at torch's fixed cost per call: ~0.3 ms
per Adam step, 10-20 % of the minimax's step. Here the reductions stay torch's (the minimum
and its index, the mean u @ w, whose summation order the records depend on) and every
elementwise operation after them runs in one kernel, in torch's order: IEEE operations, so the
same bits (tests/acquisition/test_mmd_minimax.py). e* comes from a per-step table of torch's
square roots (torch's vectorised sqrt is not always correctly rounded, but it rounds each
value the same wherever it sits in an array). numba is imported here, where it is first used.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit
from torch import Tensor


def minimax_step(u: Tensor, w: Tensor, host_w: np.ndarray, distances: np.ndarray,
                 radius: float) -> tuple[Tensor, Tensor] | None:
    """(value [b], d(value)/du [b, N]) as `minimax_value_and_weights` gives them, for u [b, N]
    on the CPU, w [N] (and `host_w`, its array) and `distances` [N], e* of every grid point
    (torch's sqrt of `point_mmd_squared` clamped at 0). None where the kernel does not decide
    every candidate's case (a non-finite u, g > E somewhere, r <= 0): the torch route then."""
    if radius <= 0 or not math.isfinite(float(u.sum())):
        return None
    g, j_star = u.min(dim=-1)
    mean = u @ w
    found = _tail(g.numpy(), j_star.numpy(), mean.numpy(), distances, host_w, radius)
    if found is None:
        return None
    value, weights = found
    return torch.from_numpy(value), torch.from_numpy(weights)


@njit(cache=True)
def _tail(g, j_star, mean, distances, w, radius):  # type: ignore[no-untyped-def]
    """The elementwise rest of `_minimax_terms` and `minimax_value_and_weights` without case 1
    (eps' = (g - E) / S <= 0 < r wherever g <= E); None if some g > E."""
    b, size = g.shape[0], w.shape[0]
    for j in range(b):
        if g[j] - mean[j] > 0.0:
            return None
    value = np.empty(b)
    weights = np.empty((b, size))
    for j in range(b):
        gap = g[j] - mean[j]
        e_star = distances[j_star[j]]
        positive = e_star > 0.0
        tau = gap / e_star if positive else 0.0
        case2 = radius <= e_star
        case3 = radius > e_star
        value[j] = (mean[j] + radius * tau + g[j]) / 2.0 if case2 else g[j]
        half = (1.0 if case2 else 0.0) / 2.0
        to_gap = (half * radius if positive else 0.0) / (e_star if positive else 1.0)
        to_minimum = half + to_gap + (1.0 if case3 else 0.0)
        to_mean = half - to_gap
        for i in range(size):
            weights[j, i] = to_mean * w[i]
        weights[j, j_star[j]] = weights[j, j_star[j]] + to_minimum
    return value, weights
