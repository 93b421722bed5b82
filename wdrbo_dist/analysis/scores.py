"""Scores comparable across problems, with intervals that say how sure the comparison is.

A run's normalised score is 1 - R_T / mean R_T(random search, same problem): 1 = no regret,
0 = as good as random search, < 0 = worse. Scores are aggregated over problems with a
stratified bootstrap (seeds resampled within each problem, every problem weighted equally), and
WDRBO's probability of improvement over a baseline is the chance that its run beats the
baseline's on the same problem and seed (ties count one half), with the same interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from wdrbo_dist.analysis.load import FINISHED
from wdrbo_dist.analysis.statistics import is_data, tie_mask

ANCHOR = "random"  # the algorithm whose mean final regret is score 0
LEVEL = 0.95
RESAMPLES = 2000
SEED = 0  # every interval of a report is drawn from this seed: the same data give the same page


@dataclass(frozen=True)
class Interval:
    """A point estimate and its percentile-bootstrap interval (NaN where undefined)."""

    estimate: float
    low: float
    high: float
    n_groups: int  # the problems (strata) with data
    n_values: int  # the runs (or pairs) over all of them


def stratified_bootstrap(groups: Sequence[np.ndarray], resamples: int = RESAMPLES, level: float = LEVEL,
                         seed: int = SEED) -> Interval:
    """The mean over groups of each group's mean, with a stratified percentile-bootstrap interval.

    Each resample redraws every group's values with replacement, keeping its size, and takes the
    same statistic. The draws: `rng = numpy.random.default_rng(seed)`, then for each non-empty
    group in order one `rng.integers(0, n, size=(resamples, n))`. A group of one value adds no
    spread; no data at all gives NaN.
    """
    data = [np.asarray(g, dtype=float) for g in groups]
    data = [g[is_data(g)] for g in data]
    data = [g for g in data if g.size]
    if not data:
        return Interval(math.nan, math.nan, math.nan, 0, 0)
    estimate = float(np.mean([g.mean() for g in data]))
    rng = np.random.default_rng(seed)
    means = np.empty((resamples, len(data)))
    for j, g in enumerate(data):
        means[:, j] = g[rng.integers(0, g.size, size=(resamples, g.size))].mean(axis=1)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(means.mean(axis=1), [tail, 1.0 - tail])
    return Interval(estimate, float(low), float(high), len(data), int(sum(g.size for g in data)))


def win_scores(reference: np.ndarray, baseline: np.ndarray) -> np.ndarray:
    """Per pair of a lower-is-better metric: 1 where the reference is lower, 1/2 for a tie
    (equal up to rounding, `tie_mask`), 0 where it is higher; pairs with a non-value dropped."""
    ref, base = np.asarray(reference, dtype=float), np.asarray(baseline, dtype=float)
    keep = is_data(ref) & is_data(base)
    ref, base = ref[keep], base[keep]
    return np.where(tie_mask(ref, base), 0.5, (ref < base).astype(float))


def normalised_scores(runs: pd.DataFrame, anchor: str = ANCHOR) -> pd.DataFrame:
    """One row per finished run: its final cumulative regret, the anchor's mean on the same
    fidelity and problem, and the score 1 - R_T / that mean (NaN where the anchor has no
    finished run or a mean that is not positive: there is nothing to normalise by)."""
    columns = ["fidelity", "problem", "algorithm", "seed", "final_cumulative_regret", "anchor_mean", "score"]
    finished = runs[runs["status"] == FINISHED]
    regret = finished["final_cumulative_regret"].to_numpy(dtype=float)
    finished = finished.assign(final_cumulative_regret=np.where(is_data(regret), regret, np.nan))
    means = (finished[finished["algorithm"] == anchor].groupby(["fidelity", "problem"])["final_cumulative_regret"]
             .mean().rename("anchor_mean").reset_index())
    out = finished.merge(means, on=["fidelity", "problem"], how="left")
    anchor_mean = out["anchor_mean"].where(out["anchor_mean"] > 0)
    out["score"] = 1.0 - out["final_cumulative_regret"] / anchor_mean
    return out.reindex(columns=columns).reset_index(drop=True)


def score_summary(scores: pd.DataFrame, problems: Sequence[str], algorithms: Sequence[str],
                  resamples: int = RESAMPLES) -> pd.DataFrame:
    """Per fidelity and algorithm: the mean normalised score per problem (a bootstrap over its
    seeds) and over all problems (`problem` = overall, the stratified bootstrap)."""
    rows = []
    for fidelity, frame in scores.groupby("fidelity", sort=False):
        for algorithm in algorithms:
            own = frame[frame["algorithm"] == algorithm]
            groups = {p: own.loc[own["problem"] == p, "score"].to_numpy() for p in problems}
            for problem, values in [*groups.items(), ("overall", None)]:
                interval = stratified_bootstrap(list(groups.values()) if values is None else [values], resamples)
                rows.append({"fidelity": fidelity, "problem": problem, "algorithm": algorithm,
                             "score": interval.estimate, "low": interval.low, "high": interval.high,
                             "n_problems": interval.n_groups, "n_runs": interval.n_values})
    return pd.DataFrame(rows, columns=["fidelity", "problem", "algorithm", "score", "low", "high",
                                       "n_problems", "n_runs"])


def improvement_probabilities(runs: pd.DataFrame, problems: Sequence[str], algorithms: Sequence[str],
                              reference: str, resamples: int = RESAMPLES) -> pd.DataFrame:
    """Per fidelity and baseline: P(the reference's run beats the baseline's on the same problem
    and seed), per problem and over problems (the stratified bootstrap of the paired win scores);
    seeds where either run did not finish are not paired."""
    rows = []
    finished = runs[runs["status"] == FINISHED]
    for fidelity, frame in finished.groupby("fidelity", sort=False):
        if reference not in set(frame["algorithm"]):
            continue
        wide = frame.pivot_table(index=["problem", "seed"], columns="algorithm",
                                 values="final_cumulative_regret", aggfunc="first")
        for baseline in [a for a in algorithms if a != reference and a in wide.columns]:
            wins = {}
            for problem in problems:
                if problem in wide.index.get_level_values("problem"):
                    pair = wide.loc[problem, [reference, baseline]]
                    wins[problem] = win_scores(pair[reference].to_numpy(), pair[baseline].to_numpy())
            for problem, values in [*wins.items(), ("overall", None)]:
                interval = stratified_bootstrap(list(wins.values()) if values is None else [values], resamples)
                rows.append({"fidelity": fidelity, "problem": problem, "reference": reference,
                             "baseline": baseline, "probability": interval.estimate, "low": interval.low,
                             "high": interval.high, "n_problems": interval.n_groups, "n_pairs": interval.n_values})
    return pd.DataFrame(rows, columns=["fidelity", "problem", "reference", "baseline", "probability", "low",
                                       "high", "n_problems", "n_pairs"])
