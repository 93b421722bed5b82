"""Pure statistics for comparing algorithms over seeds: no I/O, no pandas state, no plotting.

Conventions (regrets: lower is better): only finite values are data (`is_data`: NaN and +-inf
are dropped before counting, so n counts what the mean is taken over); the standard error is
the sample std (ddof = 1) over sqrt(n); ranks are taken within a block (one seed of one
problem: the same initial design and context stream for every algorithm, so the comparison is
paired), rank 1 = lowest regret, ties averaged; paired comparisons use d = baseline -
reference, so d > 0 is a win for the reference method (WDRBO) and a positive effect favours it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from wdrbo_dist.analysis.rank_intervals import signed_rank

ArrayLike = Sequence[float] | np.ndarray | pd.Series
LOG_DECIMALS = 12  # log-ratios are rounded to this before ranking


@dataclass(frozen=True)
class MeanSE:
    """Mean and standard error of a sample (NaN where undefined: no data, or n = 1 for the SE)."""

    mean: float
    se: float
    n: int


def is_data(values: np.ndarray) -> np.ndarray:
    """The one rule of what counts as data: finite values (not NaN, not ±inf)."""
    return np.isfinite(values)


def mean_se(values: ArrayLike) -> MeanSE:
    """Mean and standard error sd(ddof=1)/sqrt(n) of the values that are data (`is_data`)."""
    arr = np.asarray(values, dtype=float)
    arr = arr[is_data(arr)]
    n = int(arr.size)
    if n == 0:
        return MeanSE(math.nan, math.nan, 0)
    mean = float(arr.mean())
    se = float(arr.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return MeanSE(mean, se, n)


def ratio_of_means_interval(
    numerator: ArrayLike, denominator: ArrayLike, level: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """Percentile-bootstrap interval of mean(numerator) / mean(denominator), two independent
    samples each resampled with replacement (the data by `is_data`; NaN where either side has
    fewer than 2 values or a resampled denominator mean is not positive). Seeded. For the
    benchmarks' tables only: at few seeds of heavy-tailed regrets it covers far less than its
    level, so the report inverts rank tests instead (`rank_intervals`)."""
    a = np.asarray(numerator, dtype=float)
    b = np.asarray(denominator, dtype=float)
    a, b = a[is_data(a)], b[is_data(b)]
    if a.size < 2 or b.size < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    top = a[rng.integers(0, a.size, (resamples, a.size))].mean(axis=1)
    bottom = b[rng.integers(0, b.size, (resamples, b.size))].mean(axis=1)
    if not bool((bottom > 0).all()):
        return math.nan, math.nan
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(top / bottom, [tail, 1.0 - tail])
    return float(low), float(high)


def holm(pvalues: ArrayLike) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (step-down, monotone, capped at 1).

    NaN p-values (tests that could not be run) stay NaN and do not count in the family size.
    """
    p = np.asarray(pvalues, dtype=float)
    adjusted = np.full(p.shape, np.nan)
    valid = np.flatnonzero(np.isfinite(p))
    m = valid.size
    if m == 0:
        return adjusted
    order = valid[np.argsort(p[valid], kind="stable")]
    running = 0.0
    for i, idx in enumerate(order):
        running = max(running, min(1.0, (m - i) * p[idx]))
        adjusted[idx] = running
    return adjusted


def block_ranks(matrix: pd.DataFrame) -> pd.DataFrame:
    """Ranks of the columns (algorithms) within each row (block), 1 = lowest, ties averaged.

    Rows with any missing value are dropped first: a rank is only meaningful among the
    same competitors, so incomplete blocks are not ranked.
    """
    complete = matrix.dropna(axis=0, how="any")
    return complete.rank(axis=1, method="average", ascending=True)


def average_ranks(matrix: pd.DataFrame) -> tuple[pd.Series, int]:
    """Mean rank of every column over the complete blocks, and the number of such blocks."""
    ranks = block_ranks(matrix)
    if ranks.empty:
        return pd.Series(np.nan, index=matrix.columns, dtype=float), 0
    return ranks.mean(axis=0), int(len(ranks))


def tie_mask(a: np.ndarray, b: np.ndarray, rtol: float = 1e-9, atol: float = 1e-12) -> np.ndarray:
    """Pairs equal up to rounding: |a - b| <= atol + rtol * max(|a|, |b|)."""
    return np.abs(a - b) <= atol + rtol * np.maximum(np.abs(a), np.abs(b))


def signed_rank_sums(d: ArrayLike) -> tuple[float, float, int]:
    """(T+, T-, n): rank sums of the positive and negative differences after dropping zeros.

    Absolute differences are ranked with average ranks for ties (Wilcoxon's "wilcox" zero
    handling, the same as scipy's default).
    """
    arr = np.asarray(d, dtype=float)
    arr = arr[arr != 0]
    if arr.size == 0:
        return 0.0, 0.0, 0
    ranks = stats.rankdata(np.abs(arr), method="average")
    return float(ranks[arr > 0].sum()), float(ranks[arr < 0].sum()), int(arr.size)


def rank_biserial(d: ArrayLike) -> float:
    """Matched-pairs rank-biserial correlation (T+ - T-) / (T+ + T-), in [-1, 1].

    +1: every nonzero difference is positive; 0: balanced; NaN when all differences are zero.
    """
    t_plus, t_minus, n = signed_rank_sums(d)
    if n == 0:
        return math.nan
    return (t_plus - t_minus) / (t_plus + t_minus)


@dataclass(frozen=True)
class PairedComparison:
    """A paired two-sided Wilcoxon signed-rank test of a reference method against a baseline, with
    the Hodges-Lehmann estimate and the exact interval the test inverts (`rank_intervals`)."""

    n_pairs: int
    wins: int  # reference strictly better (lower) beyond the tie tolerance
    ties: int
    losses: int
    median_difference: float  # median of baseline - reference (> 0 favours the reference)
    statistic: float  # min(T+, T-) of the tested differences
    pvalue: float
    rank_biserial: float  # > 0 favours the reference
    scale: str = "log"  # "log": the estimate is a ratio baseline / reference; "raw": a difference
    estimate: float = math.nan
    low: float = math.nan  # NaN: n too small for an interval at 1 - alpha
    high: float = math.nan
    level: float = math.nan


def paired_wilcoxon(
    reference: ArrayLike,
    baseline: ArrayLike,
    rtol: float = 1e-9,
    atol: float = 1e-12,
    alpha: float = 0.05,
) -> PairedComparison:
    """Compare paired samples (same seeds, same order) of a lower-is-better metric.

    Pairs with a NaN on either side are dropped; pairs within the tie tolerance are ties. With
    every value positive the test is on the log-ratios log(baseline / reference) and the estimate
    a ratio, else on the differences. The p-value and the interval come from one inversion, so
    the interval excludes no change exactly when p < alpha; ties count against significance.
    """
    ref = np.asarray(reference, dtype=float)
    base = np.asarray(baseline, dtype=float)
    if ref.shape != base.shape:
        raise ValueError(f"paired samples differ in shape: {ref.shape} vs {base.shape}")
    keep = is_data(ref) & is_data(base)
    ref, base = ref[keep], base[keep]
    n = int(ref.size)
    if n == 0:
        return PairedComparison(0, 0, 0, 0, math.nan, math.nan, math.nan, math.nan)
    tied = tie_mask(ref, base, rtol=rtol, atol=atol)
    d = np.where(tied, 0.0, base - ref)
    wins, losses, ties = int((d > 0).sum()), int((d < 0).sum()), int(tied.sum())
    scale = "log" if bool((ref > 0).all() and (base > 0).all()) else "raw"
    # log(6/4) and log(3/2) differ in the last bit: rounded, ties and opposites are exact
    tested = np.where(tied, 0.0, np.round(np.log(base) - np.log(ref), LOG_DECIMALS)) if scale == "log" else d
    result = signed_rank(tested, alpha=alpha)
    t_plus, t_minus, _ = signed_rank_sums(tested)
    to_scale = math.exp if scale == "log" else float
    bounds = (to_scale(result.low), to_scale(result.high)) if math.isfinite(result.low) else (math.nan, math.nan)
    return PairedComparison(
        n_pairs=n, wins=wins, ties=ties, losses=losses, median_difference=float(np.median(d)),
        statistic=float(min(t_plus, t_minus)), pvalue=float(result.pvalue), rank_biserial=rank_biserial(tested),
        scale=scale, estimate=to_scale(result.estimate), low=bounds[0], high=bounds[1], level=result.level,
    )


def significant_digits_format(mean: float, se: float) -> str:
    """'mean ± se' with the SE to two significant digits and the mean to the same decimals."""
    if not math.isfinite(mean):
        return "n/a"
    if not math.isfinite(se):
        return f"{mean:.4g} ± n/a"
    if se <= 1e-9 * max(1.0, abs(mean)):  # zero up to rounding: no digits to anchor on
        return f"{mean:.4g} ± 0"
    decimals = max(0, 1 - int(math.floor(math.log10(abs(se)))))
    return f"{mean:.{decimals}f} ± {se:.{decimals}f}"


def grouped_mean_se(frame: pd.DataFrame, by: Sequence[str], value: str) -> pd.DataFrame:
    """Per group: mean, standard error (ddof = 1; NaN for a single value) and count of `value`.

    The same estimator as `mean_se`, vectorised for per-step curves: what is not data
    (`is_data`) is made NaN first, which pandas' mean, std and count skip.
    """
    values = frame[value].to_numpy(dtype=float, na_value=np.nan)
    data = frame[list(by)].assign(**{value: np.where(is_data(values), values, np.nan)})
    grouped = data.groupby(list(by), sort=False, observed=True)[value]
    out = grouped.agg(mean="mean", std="std", n="count").reset_index()  # pandas std: ddof = 1
    out["se"] = out["std"] / np.sqrt(out["n"].where(out["n"] > 0))
    out.loc[out["n"] < 2, "se"] = np.nan
    return out.drop(columns="std")
