"""The performance profile of normalised scores and its bootstrap band.

A method's profile at τ is the share of its runs (problem x seed) whose normalised score exceeds
τ. The band resamples seeds within each problem (all methods of a seed together, as they share
its design) and recomputes random search's geometric mean from the resampled seeds, so the
normaliser's uncertainty reaches it. A pointwise percentile band: the simulation does not check
its coverage, and the page says so.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from wdrbo_dist.analysis.intervals import LEVEL
from wdrbo_dist.analysis.load import FINISHED
from wdrbo_dist.analysis.statistics import is_data

PROFILE_RESAMPLES = 1000
PROFILE_POINTS = 120
SEED = 0


def _problem_draws(matrix: np.ndarray, anchor: int, picks: np.ndarray) -> np.ndarray:
    """Resamples x seeds x algorithms scores of one problem's seeds x algorithms regrets."""
    drawn = matrix[picks]  # resamples x seeds x algorithms
    anchor_values = drawn[..., anchor]
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.where(anchor_values > 0, np.log(np.where(anchor_values > 0, anchor_values, 1.0)), np.nan)
        counts = np.sum(np.isfinite(logs), axis=1)
        norm = np.exp(np.nansum(logs, axis=1) / np.where(counts > 0, counts, np.nan))
        return 1.0 - drawn / norm[:, None, None]


def profile_bands(runs: pd.DataFrame, fidelity: str, algorithms: Sequence[str], anchor: str,
                  resamples: int = PROFILE_RESAMPLES, level: float = LEVEL, seed: int = SEED) -> pd.DataFrame:
    """Per algorithm and τ on a grid over the observed scores: the profile and its band
    (columns algorithm, tau, share, low, high); empty without the anchor or any score."""
    columns = ["algorithm", "tau", "share", "low", "high"]
    frame = runs[(runs["fidelity"] == fidelity) & (runs["status"] == FINISHED)]
    wide = frame.pivot_table(index=["problem", "seed"], columns="algorithm", values="final_cumulative_regret",
                             aggfunc="first")
    names = [a for a in algorithms if a in wide.columns]
    if anchor not in wide.columns or not names:
        return pd.DataFrame(columns=columns)
    wide = wide.reindex(columns=names)
    rng = np.random.default_rng(seed)
    observed, drawn = [], []
    for _, block in wide.groupby(level="problem", sort=True):
        matrix = block.to_numpy(dtype=float)
        matrix = np.where(is_data(matrix), matrix, np.nan)
        everything = np.arange(len(matrix))[None, :]
        observed.append(_problem_draws(matrix, names.index(anchor), everything)[0])
        picks = rng.integers(0, len(matrix), (resamples, len(matrix)))
        drawn.append(_problem_draws(matrix, names.index(anchor), picks))
    scores, samples = np.concatenate(observed, axis=0), np.concatenate(drawn, axis=1)
    finite = scores[np.isfinite(scores)]
    if not finite.size:
        return pd.DataFrame(columns=columns)
    taus = np.linspace(finite.min(), finite.max(), PROFILE_POINTS)
    tail = (1 - level) / 2
    rows = []
    for j, algorithm in enumerate(names):
        mine, theirs = scores[:, j], samples[:, :, j]
        if not np.isfinite(mine).any():
            continue
        share = (mine[np.isfinite(mine), None] > taus).mean(axis=0)
        counts = np.isfinite(theirs).sum(axis=1)
        above = (np.where(np.isfinite(theirs), theirs, -np.inf)[:, :, None] > taus).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            shares = above / counts[:, None]
        low, high = np.nanquantile(shares, [tail, 1 - tail], axis=0)
        rows.append(pd.DataFrame({"algorithm": algorithm, "tau": taus, "share": share, "low": low, "high": high}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(columns=columns)
