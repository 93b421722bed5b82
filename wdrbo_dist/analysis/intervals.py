"""The report's intervals, each chosen to hold its level at the seed counts studies run.

Regrets are heavy tailed (a run stuck at a wrong x), so no interval of a mean holds at 3 to 15
seeds (docs/results.md has the simulation). Hence: the median with a distribution-free interval,
t-intervals of paired log-ratios (exact for lognormal regrets), exact Clopper-Pearson intervals
for win rates, and a Welch-Satterthwaite t for the interquartile mean over problems. Where n
allows no calibrated interval, a flag says so and the page prints that instead. Vectorised over
leading axes; the last axis holds the seeds.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

LEVEL = 0.95
TOLERANCE = 0.02  # an interval whose level is within this of LEVEL is printed as calibrated
MIN_T_SEEDS = 3  # t-intervals on fewer seeds are not printed (the simulation starts at 3)

TOO_FEW = "n too small"  # the flags the page prints: no interval at this n,
CONSERVATIVE = "conservative"  # or one that holds more than LEVEL + TOLERANCE (the win rates', always)


def _order_level(n: int, k: int) -> float:
    """P(x_(k) <= median <= x_(n+1-k)) for a continuous distribution: P(k <= B <= n - k), B ~ Bin(n, 1/2)."""
    return float(stats.binom.cdf(n - k, n, 0.5) - stats.binom.cdf(k - 1, n, 0.5))


def median_interval(x: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(median, low, high, level held) over the last axis: order statistics, interpolated between
    the two neighbouring levels (Hettmansperger & Sheather, 1986) to hold `level`; with at most
    the widest pair's level and that within TOLERANCE below `level` (n = 5: 93.75 %), that pair;
    below (n <= 4) no interval. Distribution-free: it needs no shape of the regrets."""
    xs = np.sort(np.asarray(x, dtype=float), axis=-1)
    n = xs.shape[-1]
    median = np.median(xs, axis=-1) if n else np.full(xs.shape[:-1], np.nan)
    nan = np.full(xs.shape[:-1], np.nan)
    if n == 0 or _order_level(n, 1) < level - TOLERANCE:
        return median, nan, nan, math.nan
    if _order_level(n, 1) < level:
        return median, xs[..., 0], xs[..., -1], _order_level(n, 1)
    k = max(k for k in range(1, (n + 1) // 2 + 1) if _order_level(n, k) >= level)
    outer = _order_level(n, k)
    inner = _order_level(n, k + 1) if k + 1 <= (n + 1) // 2 else 0.0
    share = (outer - level) / (outer - inner) if outer > level else 0.0
    weight = (n - k) * share / (k + (n - 2 * k) * share) if share > 0 else 0.0
    low = weight * xs[..., k] + (1 - weight) * xs[..., k - 1] if k < n else xs[..., k - 1]
    high = weight * xs[..., n - k - 1] + (1 - weight) * xs[..., n - k]
    return median, low, high, level


def t_interval(x: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(mean, low, high, standard error) over the last axis: Student's t with n - 1 degrees of
    freedom; NaN bounds below MIN_T_SEEDS values."""
    x = np.asarray(x, dtype=float)
    n = x.shape[-1]
    mean = x.mean(axis=-1) if n else np.full(x.shape[:-1], np.nan)
    if n < MIN_T_SEEDS:
        nan = np.full(x.shape[:-1], np.nan)
        return mean, nan, nan, nan
    se = x.std(axis=-1, ddof=1) / math.sqrt(n)
    half = stats.t.ppf(0.5 + level / 2, n - 1) * se
    return mean, mean - half, mean + half, se


def clopper_pearson(wins: np.ndarray | float, n: np.ndarray | int,
                    level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The exact (Clopper-Pearson) interval of a proportion from `wins` of `n` (a tie counts one
    half: the beta quantiles take non-integer counts); it holds at least `level` for every p."""
    w, n = np.asarray(wins, dtype=float), np.asarray(n, dtype=float)
    tail = (1 - level) / 2
    with np.errstate(invalid="ignore"):
        low = np.where(w > 0, stats.beta.ppf(tail, np.maximum(w, 1e-12), n - w + 1), 0.0)
        high = np.where(w < n, stats.beta.ppf(1 - tail, w + 1, np.maximum(n - w, 1e-12)), 1.0)
    bad = ~(n > 0)
    return np.where(bad, np.nan, low), np.where(bad, np.nan, high)


def interquartile_mean(values: np.ndarray) -> np.ndarray:
    """The mean of the middle half over the last axis (rliable's IQM: scipy's trim_mean, 25 %);
    with fewer than 4 values nothing is trimmed."""
    return stats.trim_mean(np.asarray(values, dtype=float), 0.25, axis=-1)


def iqm_interval(centres: np.ndarray, ses: np.ndarray, dofs: np.ndarray | int,
                 level: float = LEVEL) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(IQM, low, high) over the last axis (problems) of quantities known by a t-interval each
    (centre, standard error, degrees of freedom): the mean of the problems the IQM keeps, with
    Student's t at Welch-Satterthwaite's degrees of freedom. Problems are independent (their own
    seeds); for one problem this is its own t-interval."""
    centres = np.asarray(centres, dtype=float)
    ses = np.broadcast_to(np.asarray(ses, dtype=float), centres.shape)
    dofs = np.broadcast_to(np.asarray(dofs, dtype=float), centres.shape)
    count = centres.shape[-1]
    cut = int(0.25 * count)
    kept = np.argsort(centres, axis=-1, kind="stable")[..., cut:count - cut]
    var = np.take_along_axis(ses, kept, axis=-1) ** 2
    estimate = np.take_along_axis(centres, kept, axis=-1).mean(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        dof = var.sum(axis=-1) ** 2 / (var**2 / np.take_along_axis(dofs, kept, axis=-1)).sum(axis=-1)
        se = np.sqrt(var.sum(axis=-1)) / var.shape[-1]
        half = stats.t.ppf(0.5 + level / 2, np.where(np.isfinite(dof), dof, np.inf)) * se
    half = np.where(var.sum(axis=-1) > 0, half, 0.0)
    return estimate, estimate - half, estimate + half


def pooled_win_rate_interval(rates: np.ndarray, n: np.ndarray, level: float = LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """The interval of the mean over problems (last axis) of win rates, each over n pairs: Clopper-
    Pearson on the pooled count N * mean with N = sum n. The pooled count of problems with other
    rates is less spread than a binomial (Hoeffding, 1956), so this holds at least `level`."""
    rates, n = np.asarray(rates, dtype=float), np.asarray(n, dtype=float)
    total = n.sum(axis=-1)
    return clopper_pearson(total * rates.mean(axis=-1), total, level)
