"""Equivalence of two regret samples: two one-sided tests (TOST) on the log-ratio, margin [0.8, 1.25].

A p >= 0.05 of a test of no difference is absence of evidence, not evidence of sameness: ten
seeds can hide a 30 % shift. TOST asks the opposite question: is the ratio of geometric means
inside the margin? It is "equivalent" when the 90 % interval lies inside, "different" when not
and the 95 % interval excludes 1, else "undetermined at this n". Two designs: unpaired (Welch t on
log regrets, the two codes draw different initial designs) and paired (one-sample t on the
per-seed log-ratios, same seeds). The t-intervals hold their level on lognormal regrets at any n;
below CALIBRATED_FROM seeds a side, stuck runs on one side only make them cover less (the
`calibrated` flag; tests/analysis/test_equivalence.py measures both).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

MARGIN = (0.8, 1.25)  # ratios of geometric means that count as the same; symmetric on the log scale
LOG_MARGIN = math.log(MARGIN[1])  # log 0.8 = -log 1.25
ALPHA = 0.05  # each one-sided test's level; TOST inverts the 1 - 2 ALPHA = 90 % interval
POWER = 0.8  # the power seeds_needed aims at, were the true ratio 1
# From this many seeds a side the 90 % interval covers 88-92 % for every shape the test simulates;
# below, it does for lognormal regrets, but covers 86-88 % when one side alone has stuck runs
# (and up to 93 %, conservative, when both have them).
CALIBRATED_FROM = 15

EQUIVALENT, DIFFERENT, UNDETERMINED = "equivalent", "different", "undetermined at this n"
VERDICTS = (EQUIVALENT, DIFFERENT, UNDETERMINED)


@dataclass(frozen=True)
class Equivalence:
    """One cell's TOST. `ratio` = exp(mean log a - mean log b): the ratio of geometric means, which
    equals the ratio of means for lognormal regrets of equal log-spread. Intervals are of that
    ratio; NaN (and the verdict undetermined) below 2 values a side (2 pairs)."""

    design: str  # "unpaired" (Welch) or "paired" (one-sample t on log-ratios)
    ratio: float
    low90: float  # the interval TOST inverts: equivalent exactly when it lies inside MARGIN
    high90: float
    low95: float
    high95: float
    p_lower: float  # H0: ratio <= 0.8
    p_upper: float  # H0: ratio >= 1.25
    p_tost: float  # max of the two: equivalent when < ALPHA
    p_difference: float  # two-sided, H0: ratio = 1 (Welch's t or the paired t)
    n_a: int
    n_b: int
    df: float
    verdict: str
    seeds_needed: int | None  # per side (pairs) for 80 % TOST power at ratio 1; None when different
    calibrated: bool  # n >= CALIBRATED_FROM a side: the 90 % interval holds 88-92 % for every shape simulated


def _logs(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    """log of regrets, refused unless every value is finite and > 0 (the log-ratio needs it)."""
    x = np.asarray(values, dtype=float).reshape(-1)
    bad = x[~(np.isfinite(x) & (x > 0))]
    if bad.size:
        raise ValueError(f"equivalence: {name} holds {bad.size} regret(s) that are not finite and > 0 "
                         f"(e.g. {bad[0]!r}); the log-ratio of cumulative regrets is undefined there")
    return np.log(x)


def welch(log_a: np.ndarray, log_b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(difference of mean logs a - b, its standard error, Welch-Satterthwaite df) over the last
    axis, vectorised over leading axes; the variances have ddof 1."""
    na, nb = log_a.shape[-1], log_b.shape[-1]
    va, vb = log_a.var(axis=-1, ddof=1) / na, log_b.var(axis=-1, ddof=1) / nb
    with np.errstate(divide="ignore", invalid="ignore"):
        df = np.where(va + vb > 0, (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1)), np.inf)
    return log_a.mean(axis=-1) - log_b.mean(axis=-1), np.sqrt(va + vb), df


def one_sample(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean log-ratio, its standard error, n - 1) over the last axis: the paired design."""
    n = d.shape[-1]
    return d.mean(axis=-1), d.std(axis=-1, ddof=1) / math.sqrt(n), np.full(d.shape[:-1], n - 1.0)


def tost(diff: np.ndarray, se: np.ndarray, df: np.ndarray) -> dict[str, np.ndarray]:
    """The two one-sided p-values, the two-sided p and the 90 % and 95 % intervals of the log-ratio,
    from a t statistic with `df`. A zero `se` (identical samples) gives a point interval and
    p-values of 0 or 1. Vectorised."""
    diff, se, df = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (diff, se, df)))
    df = np.where(se > 0, df, np.inf)  # no spread: a point interval, p-values 0 or 1
    with np.errstate(divide="ignore", invalid="ignore"):
        lower_t, upper_t, zero_t = (diff + LOG_MARGIN) / se, (diff - LOG_MARGIN) / se, diff / se
        out = {
            "p_lower": stats.t.sf(lower_t, df),
            "p_upper": stats.t.cdf(upper_t, df),
            "p_difference": np.where((se == 0) & (diff == 0), 1.0, 2 * stats.t.sf(np.abs(zero_t), df)),
        }
    for level in (90, 95):
        half = np.where(se > 0, stats.t.ppf(0.5 + level / 200, df) * se, 0.0)
        out[f"low{level}"], out[f"high{level}"] = diff - half, diff + half
    out["p_tost"] = np.maximum(out["p_lower"], out["p_upper"])
    return out


def verdict_of(p_tost: np.ndarray, p_difference: np.ndarray) -> np.ndarray:
    """EQUIVALENT where TOST rejects, DIFFERENT where it does not and the two-sided test does, else
    UNDETERMINED (NaN p-values too). Vectorised."""
    return np.where(p_tost < ALPHA, EQUIVALENT, np.where(p_difference < ALPHA, DIFFERENT, UNDETERMINED))


def seeds_for_power(spread: float) -> int:
    """Seeds a side (pairs when paired) giving TOST POWER at a true ratio of 1, by the normal
    approximation n = (z_(1-ALPHA) + z_(1-(1-POWER)/2))^2 s^2 / log(1.25)^2, with s^2 the sum of
    the two sides' log-variances (unpaired) or the variance of the log-ratios (paired). At small n
    it asks slightly too few (the t's tails are heavier): a floor, not a promise."""
    z = stats.norm.ppf(1 - ALPHA) + stats.norm.ppf(1 - (1 - POWER) / 2)
    return max(2, math.ceil(z**2 * spread / LOG_MARGIN**2 - 1e-9)) if math.isfinite(spread) else 2


def equivalence(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray,
                paired: bool = False) -> Equivalence:
    """TOST of regrets `a` against `b` (ratio a / b). Paired: a[i] and b[i] share a seed (same
    length); else two independent samples. Refuses regrets that are not finite and > 0.

    seeds_needed: never fewer than the cell has; an undetermined cell whose spread alone would ask
    fewer is held back by its ratio's distance from 1, which more seeds settle either way."""
    log_a, log_b = _logs(a, "a"), _logs(b, "b")
    if paired and log_a.size != log_b.size:
        raise ValueError(f"equivalence: paired samples differ in length: {log_a.size} vs {log_b.size}")
    n_a, n_b = int(log_a.size), int(log_b.size)
    ratio = math.exp(float(log_a.mean() - log_b.mean())) if n_a and n_b else math.nan
    found = dict.fromkeys(("low90", "high90", "low95", "high95", "p_lower", "p_upper", "p_tost", "p_difference"),
                          math.nan)
    df, needed = math.nan, None
    if min(n_a, n_b) >= 2:
        diff, se, dof = one_sample(log_a - log_b) if paired else welch(log_a, log_b)
        found = {k: float(v) for k, v in tost(diff, se, dof).items()}
        for bound in ("low90", "high90", "low95", "high95"):
            found[bound] = math.exp(found[bound])
        df = float(dof)
        spread = float((log_a - log_b).var(ddof=1)) if paired else float(log_a.var(ddof=1) + log_b.var(ddof=1))
        needed = max(seeds_for_power(spread), n_a, n_b)
    verdict = str(verdict_of(np.asarray(found["p_tost"]), np.asarray(found["p_difference"])))
    return Equivalence(
        design="paired" if paired else "unpaired", ratio=ratio, **found, n_a=n_a, n_b=n_b, df=df, verdict=verdict,
        seeds_needed=None if verdict == DIFFERENT else needed, calibrated=min(n_a, n_b) >= CALIBRATED_FROM,
    )
