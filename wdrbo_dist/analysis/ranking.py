"""The critical-difference analysis (Demšar, 2006) over a study's problems.

Each problem is one block (its seeds are repeated measures, not independent data sets): the
algorithms are ranked by their median final cumulative regret over seeds (1 = lowest, ties
averaged), on problems where every algorithm finished a seed. The Friedman test asks whether any
average rank differs (scipy's `friedmanchisquare`); the Nemenyi post-hoc test compares every
pair through the studentized range (scipy's `studentized_range`), whose critical difference
CD = q_alpha / sqrt(2) * sqrt(k (k + 1) / (6 N)) is the bar the diagram draws. Groups are the
maximal runs of algorithms, in rank order, none of whose pairs differ; when the Friedman test
does not reject, no pair is called different and all algorithms form one group.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from wdrbo_dist.analysis.load import FINISHED
from wdrbo_dist.analysis.statistics import block_ranks

ALPHA = 0.05


@dataclass
class CriticalDifference:
    """Average ranks over complete blocks, the Friedman test, Nemenyi's pairwise p-values, groups."""

    average_ranks: pd.Series  # algorithm -> mean rank, best first
    n_blocks: int
    friedman_statistic: float
    friedman_pvalue: float
    critical_difference: float
    pvalues: pd.DataFrame  # Nemenyi, algorithm x algorithm (1 on the diagonal)
    groups: list[list[str]] = field(default_factory=list)  # in rank order
    alpha: float = ALPHA

    @property
    def rejects(self) -> bool:
        return math.isfinite(self.friedman_pvalue) and self.friedman_pvalue < self.alpha


def block_matrix(runs: pd.DataFrame, fidelity: str, algorithms: Sequence[str]) -> pd.DataFrame:
    """Problem x algorithm: the median final cumulative regret over finished seeds (NaN where an
    algorithm finished none: that problem is no complete block)."""
    frame = runs[(runs["fidelity"] == fidelity) & (runs["status"] == FINISHED)]
    values = frame["final_cumulative_regret"].to_numpy(dtype=float)
    frame = frame.assign(final_cumulative_regret=np.where(np.isfinite(values), values, np.nan))
    matrix = frame.pivot_table(index="problem", columns="algorithm", values="final_cumulative_regret",
                               aggfunc="median")
    problems = list(dict.fromkeys(frame["problem"]))
    return matrix.reindex(index=problems, columns=[a for a in algorithms if a in matrix.columns])


def nemenyi_pvalues(average_ranks: pd.Series, n_blocks: int) -> pd.DataFrame:
    """Two-sided Nemenyi p-values of every pair: |R_i - R_j| / sqrt(k (k + 1) / (6 N)) times
    sqrt(2) against the studentized range of k means with infinite degrees of freedom."""
    k = len(average_ranks)
    names = list(average_ranks.index)
    if k < 2 or n_blocks < 1:
        return pd.DataFrame(np.nan, index=names, columns=names)
    ranks = average_ranks.to_numpy(dtype=float)
    z = np.abs(ranks[:, None] - ranks[None, :]) / math.sqrt(k * (k + 1) / (6.0 * n_blocks))
    p = stats.studentized_range.sf(z * math.sqrt(2.0), k, np.inf)
    np.fill_diagonal(p, 1.0)
    return pd.DataFrame(np.minimum(p, 1.0), index=names, columns=names)


def nemenyi_critical_difference(k: int, n_blocks: int, alpha: float = ALPHA) -> float:
    """The smallest difference of average ranks Nemenyi's test calls significant at `alpha`."""
    if k < 2 or n_blocks < 1:
        return math.nan
    q = float(stats.studentized_range.ppf(1.0 - alpha, k, np.inf))
    return q / math.sqrt(2.0) * math.sqrt(k * (k + 1) / (6.0 * n_blocks))


def groups_not_different(order: Sequence[str], different: pd.DataFrame) -> list[list[str]]:
    """Maximal runs of consecutive algorithms (in `order`) with no pair marked `different`,
    leaving out runs of one algorithm: the bars a critical-difference diagram draws."""
    names = list(order)
    spans: list[tuple[int, int]] = []
    for start in range(len(names)):
        end = start
        while end + 1 < len(names) and not any(bool(different.loc[names[i], names[end + 1]])
                                               for i in range(start, end + 1)):
            end += 1
        if end > start and not any(s <= start and end <= e for s, e in spans):
            spans.append((start, end))
    return [names[s : e + 1] for s, e in spans]


def critical_difference(matrix: pd.DataFrame, alpha: float = ALPHA) -> CriticalDifference:
    """The analysis of a blocks x algorithms table of a lower-is-better metric; blocks with a
    missing value are left out (a rank is only meaningful among the same competitors)."""
    ranks = block_ranks(matrix)
    n = int(len(ranks))
    k = int(matrix.shape[1])
    average = (ranks.mean(axis=0) if n else pd.Series(np.nan, index=matrix.columns)).sort_values(kind="stable")
    statistic = pvalue = math.nan
    complete = matrix.dropna(axis=0, how="any")
    if k >= 3 and n >= 2:
        if np.ptp(complete.to_numpy(dtype=float), axis=1).any():  # scipy divides by 0 when all tie
            result = stats.friedmanchisquare(*(complete[c].to_numpy(dtype=float) for c in complete.columns))
            statistic, pvalue = float(result.statistic), float(result.pvalue)
        else:
            statistic, pvalue = 0.0, 1.0
    pvalues = nemenyi_pvalues(average, n)
    rejects = math.isfinite(pvalue) and pvalue < alpha
    different = (pvalues < alpha) & rejects
    groups = groups_not_different(list(average.index), different) if n else []
    return CriticalDifference(average, n, statistic, pvalue, nemenyi_critical_difference(k, n, alpha),
                              pvalues, groups, alpha)


def critical_difference_tables(analyses: dict[str, CriticalDifference]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Long frames for the CSVs: one row per fidelity x algorithm, one per fidelity x pair."""
    rows, pairs = [], []
    for fidelity, cd in analyses.items():
        membership = {a: [i + 1 for i, g in enumerate(cd.groups) if a in g] for a in cd.average_ranks.index}
        for algorithm, rank in cd.average_ranks.items():
            rows.append({"fidelity": fidelity, "algorithm": algorithm, "average_rank": float(rank),
                         "n_blocks": cd.n_blocks, "groups": " ".join(map(str, membership[algorithm])),
                         "friedman_statistic": cd.friedman_statistic, "friedman_pvalue": cd.friedman_pvalue,
                         "critical_difference": cd.critical_difference})
        names = list(cd.average_ranks.index)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                p = float(cd.pvalues.loc[a, b])
                pairs.append({"fidelity": fidelity, "algorithm": a, "other": b,
                              "rank_difference": float(cd.average_ranks[b] - cd.average_ranks[a]),
                              "pvalue_nemenyi": p,
                              "significant": bool(cd.rejects and math.isfinite(p) and p < cd.alpha)})
    return (pd.DataFrame(rows, columns=["fidelity", "algorithm", "average_rank", "n_blocks", "groups",
                                        "friedman_statistic", "friedman_pvalue", "critical_difference"]),
            pd.DataFrame(pairs, columns=["fidelity", "algorithm", "other", "rank_difference", "pvalue_nemenyi",
                                         "significant"]))
