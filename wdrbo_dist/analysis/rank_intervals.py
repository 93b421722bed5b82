"""Rank tests and the intervals they invert: Wilcoxon signed-rank (paired) and Mann-Whitney U.

The Hodges-Lehmann estimate is the median of the Walsh averages (paired) or of the pairwise
differences (two samples); the interval runs from the k-th to the (N + 1 - k)-th of them, k the
largest count whose exact two-sided tail is below alpha, so it excludes 0 exactly when p < alpha.
A zero among them counts on the side that keeps the null (it never helps a rejection), so the
two agree with ties as well. Exact null distributions; vectorised over leading axes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats

ALPHA = 0.05
EXACT_SIGNED_RANK_MAX = 400  # pairs; above, the normal approximation of the null
EXACT_RANK_SUM_MAX = 40_000  # m * n; above, the normal approximation of the null


@functools.lru_cache(maxsize=64)
def signed_rank_cdf(n: int) -> np.ndarray:
    """P(T+ <= t) for t = 0 .. n(n+1)/2 under the null (no ties): the exact distribution."""
    top = n * (n + 1) // 2
    if n > EXACT_SIGNED_RANK_MAX:
        sd = math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
        return stats.norm.cdf((np.arange(top + 1) + 0.5 - top / 2) / sd)
    p = np.ones(1)
    for r in range(1, n + 1):
        nxt = np.zeros(p.size + r)
        nxt[: p.size] += p
        nxt[r:] += p
        p = nxt / 2
    return np.minimum(np.cumsum(p), 1.0)


@functools.lru_cache(maxsize=64)
def rank_sum_cdf(m: int, n: int) -> np.ndarray:
    """P(U <= u) for u = 0 .. m n under the null: the Gaussian binomial [m+n choose m]'s
    coefficients (the number of orderings with u pairs b > a) over C(m+n, m)."""
    m, n = min(m, n), max(m, n)
    if m * n > EXACT_RANK_SUM_MAX:
        sd = math.sqrt(m * n * (m + n + 1) / 12)
        return stats.norm.cdf((np.arange(m * n + 1) + 0.5 - m * n / 2) / sd)
    c = np.zeros(m * n + 1)
    c[0] = 1.0
    for i in range(1, m + 1):  # c = [n+i-1 choose i-1]_q -> [n+i choose i]_q
        shifted = np.zeros_like(c)
        shifted[n + i:] = c[: c.size - n - i]
        c = c - shifted  # times (1 - q^(n+i))
        for r in range(i):  # over (1 - q^i): running sums along each residue class
            c[r::i] = np.cumsum(c[r::i])
    c = np.maximum(c, 0.0)
    return np.minimum(np.cumsum(c) / c.sum(), 1.0)


def critical_count(cdf: np.ndarray, alpha: float = ALPHA) -> int:
    """The largest k with 2 P(T <= k - 1) < alpha (0 when even the most extreme count is not)."""
    return int(np.searchsorted(2 * cdf, alpha, side="left"))


def smallest_pvalue(n: int) -> float:
    """The smallest two-sided p of the signed-rank test on n pairs: 2 / 2^n."""
    return float(min(1.0, 2 * signed_rank_cdf(n)[0])) if n > 0 else math.nan


def seeds_for_holm(m: int, alpha: float = ALPHA) -> int:
    """The fewest paired seeds whose smallest p survives Holm over m tests (m * 2 / 2^n < alpha)."""
    return max(1, math.floor(math.log2(2 * max(m, 1) / alpha)) + 1)


@dataclass(frozen=True)
class RankInterval:
    """A Hodges-Lehmann estimate, the exact interval the test inverts and the test's p-value.

    Arrays over the leading axes (floats for one sample). `low` / `high` are NaN where no count
    reaches the level ("n too small"); `level` is the level the interval holds (at least 1 - alpha)."""

    estimate: np.ndarray | float
    low: np.ndarray | float
    high: np.ndarray | float
    level: float
    pvalue: np.ndarray | float
    n: int


def _invert(values: np.ndarray, cdf: np.ndarray, alpha: float, n: int) -> RankInterval:
    values = np.sort(values, axis=-1)
    total = values.shape[-1]
    above = np.sum(values > 0, axis=-1)
    not_below = np.sum(values >= 0, axis=-1)
    pvalue = np.minimum(1.0, 2 * np.minimum(cdf[not_below], cdf[total - above]))
    k = critical_count(cdf, alpha)
    if k == 0:
        low = high = np.full(values.shape[:-1], np.nan)
        level = math.nan
    else:
        low, high = values[..., k - 1], values[..., total - k]
        level = float(1 - 2 * cdf[k - 1])
    estimate = np.median(values, axis=-1)
    if estimate.ndim == 0:
        return RankInterval(float(estimate), float(low), float(high), level, float(pvalue), n)
    return RankInterval(estimate, low, high, level, pvalue, n)


def signed_rank(d: np.ndarray, alpha: float = ALPHA) -> RankInterval:
    """Paired: the Hodges-Lehmann estimate of the centre of `d` (last axis: the pairs), its
    exact Wilcoxon interval and the two-sided signed-rank p-value (T+ = positive Walsh averages)."""
    d = np.asarray(d, dtype=float)
    n = d.shape[-1]
    if n == 0:
        return RankInterval(math.nan, math.nan, math.nan, math.nan, math.nan, 0)
    i, j = np.triu_indices(n)
    return _invert((d[..., i] + d[..., j]) / 2, signed_rank_cdf(n), alpha, n)


def rank_sum(a: np.ndarray, b: np.ndarray, alpha: float = ALPHA) -> RankInterval:
    """Two samples: the Hodges-Lehmann shift of `b` against `a` (median of b_j - a_i), its exact
    Mann-Whitney interval and the two-sided Mann-Whitney U p-value."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    m, n = a.shape[-1], b.shape[-1]
    if m == 0 or n == 0:
        return RankInterval(math.nan, math.nan, math.nan, math.nan, math.nan, 0)
    diffs = (b[..., None, :] - a[..., :, None]).reshape(*np.broadcast_shapes(a.shape[:-1], b.shape[:-1]), m * n)
    return _invert(diffs, rank_sum_cdf(m, n), alpha, m + n)
