"""Per-step curves across seeds: the median with its distribution-free 95 % band.

`curve_stats` is `grouped_mean_se` (mean, SE, n per step) plus `median`, `low`, `high`: the
median over seeds and its order-statistic interval (`intervals.median_interval`), which holds
its level whatever the shape of the regrets; with fewer than 5 seeds at a step there is none.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from wdrbo_dist.analysis.intervals import median_interval
from wdrbo_dist.analysis.statistics import grouped_mean_se, is_data

BAND_COLUMNS = ["median", "low", "high"]


def columns_median_interval(matrix: np.ndarray) -> np.ndarray:
    """Seeds x steps (NaN: no value) -> 3 x steps: median, low, high of each column's values."""
    matrix = np.where(is_data(matrix), matrix, np.nan)
    counts = np.sum(~np.isnan(matrix), axis=0)
    ordered = np.sort(matrix, axis=0)  # NaN last: a column's first `count` rows are its values
    out = np.full((3, matrix.shape[1]), np.nan)
    for n in np.unique(counts[counts > 0]):
        columns = counts == n
        median, low, high, _ = median_interval(ordered[:n, columns].T)
        out[:, columns] = np.stack([median, low, high])
    return out


def median_band(steps: pd.DataFrame, by: Sequence[str], value: str) -> pd.DataFrame:
    """Per group of `by` (without `step`) and step: the median of `value` over seeds and its band."""
    keys = [k for k in by if k != "step"]
    out = []
    for key, group in steps.groupby(keys, sort=True, observed=True) if keys else [((), steps)]:
        wide = group.pivot_table(index="seed", columns="step", values=value, aggfunc="first", dropna=False)
        stats = columns_median_interval(wide.to_numpy(dtype=float))
        frame = pd.DataFrame({"step": wide.columns.to_numpy(), **dict(zip(BAND_COLUMNS, stats))})
        for name, part in zip(keys, key if isinstance(key, tuple) else (key,)):
            frame[name] = part
        out.append(frame)
    if not out:
        return pd.DataFrame(columns=[*keys, "step", *BAND_COLUMNS])
    return pd.concat(out, ignore_index=True)[[*keys, "step", *BAND_COLUMNS]]


def curve_stats(steps: pd.DataFrame, by: Sequence[str], value: str) -> pd.DataFrame:
    """`grouped_mean_se` of `value` per `by` (which includes `step`) with the median and its band."""
    stats = grouped_mean_se(steps, by, value)
    if stats.empty:
        return stats.assign(**{c: pd.Series(dtype=float) for c in BAND_COLUMNS})
    return stats.merge(median_band(steps, by, value), on=list(by), how="left")
