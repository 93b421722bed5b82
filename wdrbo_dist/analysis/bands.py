"""Per-step curves across seeds with a bootstrap band: what every curve of the report draws.

`curve_stats` is `grouped_mean_se` (mean, SE, n per step) plus `low` / `high`, a percentile-
bootstrap interval of the mean over seeds. A curve's seeds are resampled whole (the same draw
for all of its steps), so the band is that of the curve, not of steps resampled apart.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd

from wdrbo_dist.analysis.scores import LEVEL, SEED
from wdrbo_dist.analysis.statistics import grouped_mean_se, is_data

CURVE_RESAMPLES = 1000
DRAW_NUMBERS = 20_000_000  # resampled values held at once (160 MB)


def bootstrap_band(steps: pd.DataFrame, by: Sequence[str], value: str, resamples: int = CURVE_RESAMPLES,
                   level: float = LEVEL, seed: int = SEED) -> pd.DataFrame:
    """Per group of `by` (without `step`) and step: the interval of the mean of `value` over
    seeds; NaN where fewer than two seeds have a value at that step."""
    keys = [k for k in by if k != "step"]
    out = []
    rng = np.random.default_rng(seed)
    tail = (1.0 - level) / 2.0
    for key, group in steps.groupby(keys, sort=True, observed=True) if keys else [((), steps)]:
        wide = group.pivot_table(index="seed", columns="step", values=value, aggfunc="first", dropna=False)
        matrix = wide.to_numpy(dtype=float)
        matrix = np.where(is_data(matrix), matrix, np.nan)
        counts = np.sum(~np.isnan(matrix), axis=0)
        picks = rng.integers(0, len(matrix), size=(resamples, len(matrix)))
        # Resamples a slice at a time: all at once they are resamples x seeds x steps numbers (5 GB
        # for 6,250 seeds of 100 steps); each slice's means are those of the whole draw.
        chunk = max(1, DRAW_NUMBERS // max(1, matrix.size))
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # steps without seeds: NaN, said below
            means = np.concatenate([np.nanmean(matrix[picks[i:i + chunk]], axis=1)
                                    for i in range(0, resamples, chunk)])
            low, high = np.nanquantile(means, [tail, 1.0 - tail], axis=0)
        low, high = np.where(counts >= 2, low, np.nan), np.where(counts >= 2, high, np.nan)
        frame = pd.DataFrame({"step": wide.columns.to_numpy(), "low": low, "high": high})
        for name, part in zip(keys, key if isinstance(key, tuple) else (key,)):
            frame[name] = part
        out.append(frame)
    if not out:
        return pd.DataFrame(columns=[*keys, "step", "low", "high"])
    return pd.concat(out, ignore_index=True)[[*keys, "step", "low", "high"]]


def curve_stats(steps: pd.DataFrame, by: Sequence[str], value: str) -> pd.DataFrame:
    """`grouped_mean_se` of `value` per `by` (which includes `step`) with its bootstrap band."""
    stats = grouped_mean_se(steps, by, value)
    if stats.empty:
        return stats.assign(low=pd.Series(dtype=float), high=pd.Series(dtype=float))
    return stats.merge(bootstrap_band(steps, by, value), on=list(by), how="left")

