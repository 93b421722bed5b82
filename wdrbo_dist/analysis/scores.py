"""Scores comparable across problems, with intervals that say how sure the comparison is.

A method's normalised score on a problem is 1 - its regret over random search's, as the ratio of
geometric means over the seeds both finished: the paired log-ratios' t-interval carries random
search's uncertainty too. Over problems, the interquartile mean of the log-ratios: a problem
where random search's regret is small cannot swing it. The probability that the reference beats
a baseline on the same seed (ties one half) is a win rate with an exact Clopper-Pearson interval.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from wdrbo_dist.analysis.intervals import (
    CONSERVATIVE, MIN_T_SEEDS, TOO_FEW, clopper_pearson, iqm_interval, pooled_win_rate_interval, t_interval,
)
from wdrbo_dist.analysis.load import FINISHED
from wdrbo_dist.analysis.statistics import is_data, tie_mask

ANCHOR = "random"  # the algorithm whose regret is score 0
CALIBRATED_SCORE_FROM = 10  # seeds; below, the t-interval held up to 97.6 % (conservative) in the simulation


def win_scores(reference: np.ndarray, baseline: np.ndarray) -> np.ndarray:
    """Per pair of a lower-is-better metric: 1 where the reference is lower, 1/2 for a tie
    (equal up to rounding, `tie_mask`), 0 where it is higher; pairs with a non-value dropped."""
    ref, base = np.asarray(reference, dtype=float), np.asarray(baseline, dtype=float)
    keep = is_data(ref) & is_data(base)
    ref, base = ref[keep], base[keep]
    return np.where(tie_mask(ref, base), 0.5, (ref < base).astype(float))


def _final(runs: pd.DataFrame) -> pd.DataFrame:
    """(fidelity, problem, seed) x algorithm final cumulative regret of finished runs, data only."""
    finished = runs[runs["status"] == FINISHED]
    regret = finished["final_cumulative_regret"].to_numpy(dtype=float)
    finished = finished.assign(final_cumulative_regret=np.where(is_data(regret), regret, np.nan))
    return finished.pivot_table(index=["fidelity", "problem", "seed"], columns="algorithm",
                                values="final_cumulative_regret", aggfunc="first")


def anchor_geometric_means(runs: pd.DataFrame, anchor: str = ANCHOR) -> pd.Series:
    """(fidelity, problem) -> the geometric mean of the anchor's final regrets (NaN where one is
    not positive: a ratio needs positive regrets)."""
    wide = _final(runs)
    if anchor not in wide.columns:
        empty = pd.MultiIndex.from_arrays([[], []], names=["fidelity", "problem"])
        return pd.Series(index=empty, dtype=float, name="anchor_geometric_mean")
    values = wide[anchor].dropna()
    logs = np.log(values.where(values > 0))
    return np.exp(logs.groupby(level=["fidelity", "problem"]).mean()).rename("anchor_geometric_mean")


def normalised_scores(runs: pd.DataFrame, anchor: str = ANCHOR) -> pd.DataFrame:
    """One row per finished run: 1 - R_T / the anchor's geometric mean on the same fidelity and
    problem (NaN without a finished anchor run or with a non-positive one)."""
    columns = ["fidelity", "problem", "algorithm", "seed", "final_cumulative_regret", "anchor_geometric_mean", "score"]
    finished = runs[runs["status"] == FINISHED]
    regret = finished["final_cumulative_regret"].to_numpy(dtype=float)
    out = finished.assign(final_cumulative_regret=np.where(is_data(regret), regret, np.nan))
    out = out.merge(anchor_geometric_means(runs, anchor).reset_index(), on=["fidelity", "problem"], how="left")
    out["score"] = 1.0 - out["final_cumulative_regret"] / out["anchor_geometric_mean"]
    return out.reindex(columns=columns).reset_index(drop=True)


def score_flag(n: int) -> str:
    """TOO_FEW below MIN_T_SEEDS pairs, CONSERVATIVE below CALIBRATED_SCORE_FROM, else ''."""
    return TOO_FEW if n < MIN_T_SEEDS else CONSERVATIVE if n < CALIBRATED_SCORE_FROM else ""


def _log_ratios(frame: pd.DataFrame, algorithm: str, anchor: str) -> np.ndarray:
    """log(R_alg / R_anchor) over the seeds both finished with positive regrets."""
    pair = frame[list(dict.fromkeys([algorithm, anchor]))].dropna()
    pair = pair[(pair > 0).all(axis=1)]
    return np.log(pair[algorithm].to_numpy()) - np.log(pair[anchor].to_numpy())


def score_summary(runs: pd.DataFrame, problems: Sequence[str], algorithms: Sequence[str],
                  anchor: str = ANCHOR) -> pd.DataFrame:
    """Per fidelity and algorithm: the score per problem (paired log-ratio t-interval) and over
    problems (`problem` = overall: 1 - exp(IQM of the log-ratios), Welch-Satterthwaite t)."""
    columns = ["fidelity", "problem", "algorithm", "score", "low", "high", "n_problems", "n_pairs", "flag",
               "log_ratio", "se"]
    wide = _final(runs)
    rows = []
    if anchor not in wide.columns:
        return pd.DataFrame(rows, columns=columns)
    for fidelity in dict.fromkeys(wide.index.get_level_values("fidelity")):
        by_problem = wide.loc[fidelity]
        for algorithm in [a for a in algorithms if a in wide.columns]:
            per = []
            for problem in [p for p in problems if p in by_problem.index.get_level_values("problem")]:
                d = _log_ratios(by_problem.loc[problem], algorithm, anchor)
                if not d.size:
                    continue
                centre, low, high, se = (float(v) for v in t_interval(d))
                per.append((problem, centre, se, d.size))
                rows.append({"fidelity": fidelity, "problem": problem, "algorithm": algorithm,
                             "score": 1 - math.exp(centre), "low": 1 - math.exp(high), "high": 1 - math.exp(low),
                             "n_problems": 1, "n_pairs": d.size, "flag": score_flag(d.size),
                             "log_ratio": centre, "se": se})
            if not per:
                continue
            centres, ses, counts = (np.array([p[i] for p in per], dtype=float) for i in (1, 2, 3))
            fewest = int(counts.min())
            centre, low, high = (float(v) for v in iqm_interval(centres, ses, counts - 1))
            if fewest < MIN_T_SEEDS:
                low = high = math.nan
            rows.append({"fidelity": fidelity, "problem": "overall", "algorithm": algorithm,
                         "score": 1 - math.exp(centre), "low": 1 - math.exp(high), "high": 1 - math.exp(low),
                         "n_problems": len(per), "n_pairs": int(counts.sum()), "flag": score_flag(fewest),
                         "log_ratio": centre, "se": math.nan})
    return pd.DataFrame(rows, columns=columns)


def improvement_probabilities(runs: pd.DataFrame, problems: Sequence[str], algorithms: Sequence[str],
                              reference: str | None) -> pd.DataFrame:
    """Per fidelity and baseline: the share of seeds where the reference's run beats the
    baseline's (ties one half), per problem with its Clopper-Pearson interval and over problems
    (the mean of the problems' shares, Clopper-Pearson on the pooled count); no rows without one."""
    columns = ["fidelity", "problem", "reference", "baseline", "probability", "low", "high", "n_problems",
               "n_pairs", "flag"]
    wide = _final(runs)
    rows = []
    if reference is None or reference not in wide.columns:
        return pd.DataFrame(rows, columns=columns)
    for fidelity in dict.fromkeys(wide.index.get_level_values("fidelity")):
        by_problem = wide.loc[fidelity]
        for baseline in [a for a in algorithms if a != reference and a in wide.columns]:
            rates, counts = [], []
            for problem in [p for p in problems if p in by_problem.index.get_level_values("problem")]:
                pair = by_problem.loc[problem]
                wins = win_scores(pair[reference].to_numpy(), pair[baseline].to_numpy())
                if not wins.size:
                    continue
                low, high = clopper_pearson(wins.sum(), wins.size)
                rates.append(float(wins.mean()))
                counts.append(wins.size)
                rows.append({"fidelity": fidelity, "problem": problem, "reference": reference, "baseline": baseline,
                             "probability": rates[-1], "low": float(low), "high": float(high), "n_problems": 1,
                             "n_pairs": wins.size, "flag": CONSERVATIVE})
            if rates:
                low, high = pooled_win_rate_interval(np.array(rates), np.array(counts))
                rows.append({"fidelity": fidelity, "problem": "overall", "reference": reference,
                             "baseline": baseline, "probability": float(np.mean(rates)), "low": float(low),
                             "high": float(high), "n_problems": len(rates), "n_pairs": int(sum(counts)),
                             "flag": CONSERVATIVE})
    return pd.DataFrame(rows, columns=columns)
