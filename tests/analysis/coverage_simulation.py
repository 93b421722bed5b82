"""How often each interval of the report covers its true value, on regrets shaped like this field's.

Regrets are drawn lognormal (log-sd 0.5 and 1) or from a heavy-tailed mixture (85 % lognormal(0,
0.5), 15 % runs stuck at ten times the regret, lognormal(log 10, 1)); a method's regret is the
baseline's times a factor, so a ratio's true value is known. Every kind of interval the report
prints is computed by the report's own functions on REPETITIONS simulated studies at once
(vectorised, one fixed seed). `python -m tests.analysis.coverage_simulation` prints the table.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np
import pandas as pd
from scipy import optimize, stats

from wdrbo_dist.analysis.intervals import (
    CONSERVATIVE, LEVEL, TOO_FEW, clopper_pearson, interquartile_mean, iqm_interval, median_interval,
    pooled_win_rate_interval, t_interval,
)
from wdrbo_dist.analysis.rank_intervals import critical_count, rank_sum, rank_sum_cdf, signed_rank, signed_rank_cdf
from wdrbo_dist.analysis.scores import score_flag
from wdrbo_dist.analysis.tables import to_markdown

REPETITIONS = 2000
SEEDS = (3, 5, 10, 15)
SEED = 20240601
RATIO = 0.5  # a method's regret against the baseline's, one problem
PROBLEM_RATIOS = (0.2, 0.4, 0.7, 1.0, 1.5, 12.0)  # six problems; the last: random search's regret is small


def _mixture_logs(rng: np.random.Generator, size: tuple[int, ...]) -> np.ndarray:
    stuck = rng.random(size) < 0.15
    return np.where(stuck, rng.normal(math.log(10), 1.0, size), rng.normal(0.0, 0.5, size))


DISTRIBUTIONS: dict[str, Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]] = {
    "lognormal σ=0.5": lambda rng, size: rng.normal(0.0, 0.5, size),
    "lognormal σ=1": lambda rng, size: rng.normal(0.0, 1.0, size),
    "mixture (15 % stuck ×10)": _mixture_logs,
}  # each draws log-regrets


def _mixture_median() -> float:
    cdf = lambda y: 0.85 * stats.norm.cdf(y / 0.5) + 0.15 * stats.norm.cdf(y - math.log(10)) - 0.5
    return float(optimize.brentq(cdf, -5, 5))


MEDIANS = {"lognormal σ=0.5": 1.0, "lognormal σ=1": 1.0, "mixture (15 % stuck ×10)": math.exp(_mixture_median())}


@functools.lru_cache(maxsize=None)
def _win_probability(name: str, ratio: float) -> float:
    """P(ratio * X < Y) for independent X, Y of the distribution (exact for the lognormals)."""
    if name.startswith("lognormal"):
        sigma = 0.5 if "0.5" in name else 1.0
        return float(stats.norm.cdf(-math.log(ratio) / (sigma * math.sqrt(2))))
    rng = np.random.default_rng(7)
    x, y = _mixture_logs(rng, (4_000_000,)), _mixture_logs(rng, (4_000_000,))
    return float(np.mean(x + math.log(ratio) < y))


def _covers(low: np.ndarray, high: np.ndarray, truth: float | np.ndarray) -> float:
    """The share of repetitions whose interval holds the truth; NaN when no interval is printed."""
    if np.all(np.isnan(low)):
        return math.nan
    return float(np.mean((low <= truth) & (truth <= high)))


def coverage_row(name: str, n: int, rng: np.random.Generator) -> dict[str, float]:
    """One distribution and seed count: the coverage of every kind of interval."""
    draw, reps = DISTRIBUTIONS[name], REPETITIONS
    row: dict[str, float] = {}
    _, low, high, _ = median_interval(np.exp(draw(rng, (reps, n))))
    row["median regret"] = _covers(low, high, MEDIANS[name])
    shift = math.log(RATIO)
    d = shift + draw(rng, (reps, n)) - draw(rng, (reps, n))  # paired log-ratios, method over random search
    _, low, high, _ = t_interval(d)
    row["normalised score, one problem"] = _covers(low, high, shift)
    shifts = np.log(PROBLEM_RATIOS)
    d6 = shifts[:, None] + draw(rng, (reps, len(shifts), n)) - draw(rng, (reps, len(shifts), n))
    centre, _, _, se = t_interval(d6)
    _, low, high = iqm_interval(centre, se, n - 1)
    row["normalised score, IQM of 6 problems"] = _covers(low, high, float(interquartile_mean(shifts)))
    paired = signed_rank(shift + draw(rng, (reps, n)) - draw(rng, (reps, n)))
    row["ratio, paired (Wilcoxon)"] = _covers(paired.low, paired.high, shift)
    apart = rank_sum(draw(rng, (reps, n)), shift + draw(rng, (reps, n)))
    row["ratio, unpaired (Mann-Whitney)"] = _covers(apart.low, apart.high, shift)
    wins = (shift + draw(rng, (reps, n)) < draw(rng, (reps, n))).sum(axis=-1)
    low, high = clopper_pearson(wins, n)
    row["win rate, one problem"] = _covers(low, high, _win_probability(name, RATIO))
    truths = np.array([_win_probability(name, r) for r in PROBLEM_RATIOS])
    rates = (shifts[:, None] + draw(rng, (reps, len(shifts), n)) < draw(rng, (reps, len(shifts), n))).mean(axis=-1)
    low, high = pooled_win_rate_interval(rates, np.full(rates.shape, n))
    row["win rate, mean of 6 problems"] = _covers(low, high, float(truths.mean()))
    return row


def page_mark(kind: str, n: int) -> tuple[str, float]:
    """What the page prints for this kind of interval at n seeds a side: its flag ('' calibrated,
    TOO_FEW, CONSERVATIVE) and the level it claims (95 %, or the exact level a rank test allows)."""
    if kind == "median regret":
        level = median_interval(np.zeros(n))[3]
        return (TOO_FEW, math.nan) if math.isnan(level) else ("", LEVEL)
    if kind.startswith("normalised score"):
        return score_flag(n), LEVEL
    if kind.startswith("ratio"):
        cdf = signed_rank_cdf(n) if kind.startswith("ratio, paired") else rank_sum_cdf(n, n)
        k = critical_count(cdf)
        return (TOO_FEW, math.nan) if k == 0 else ("", float(1 - 2 * cdf[k - 1]))
    return CONSERVATIVE, LEVEL  # win rates: Clopper-Pearson holds at least its level


def coverage_table(seed: int = SEED) -> pd.DataFrame:
    """Coverage (share of REPETITIONS) per kind of interval x distribution x number of seeds."""
    rng = np.random.default_rng(seed)
    rows = []
    for name in DISTRIBUTIONS:
        for n in SEEDS:
            for kind, value in coverage_row(name, n, rng).items():
                flag, level = page_mark(kind, n)
                rows.append({"kind": kind, "distribution": name, "n": n, "coverage": value, "flag": flag,
                             "level": level})
    return pd.DataFrame(rows)


if __name__ == "__main__":
    table = coverage_table()
    table["cell"] = [("—" if math.isnan(c) else f"{100 * c:.1f}") + {"": "", TOO_FEW: "", CONSERVATIVE: "†"}[f]
                     for c, f in zip(table["coverage"], table["flag"])]
    wide = table.pivot(index=["kind", "distribution"], columns="n", values="cell").reindex(
        index=list(dict.fromkeys(zip(table["kind"], table["distribution"]))))
    print(to_markdown(wide.rename(columns=lambda n: f"n = {n}")))
